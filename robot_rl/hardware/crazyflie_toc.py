"""The emulated Crazyflie's log and parameter tables of contents (what cflib downloads at connection).

Names, C types and defaults follow crazyflie-firmware (``LOG_GROUP_START`` / ``PARAM_GROUP_START`` blocks in
``src/modules/src``: stabilizer.c, estimator_kalman.c, supervisor.c, commander.c, controller_pid.c,
attitude_pid_controller.c, pm_stm32f4.c, deck_core.c, sysload.c). The set covers what the robot_rl bridge
(:mod:`robot_rl.hardware.crazyflie_link`) and Bitcraze's cflib examples and helpers use: ``stateEstimate.*``,
``stabilizer.roll/pitch/yaw`` (basic logging), ``kalman.varP*`` (``cflib.utils.reset_estimator``),
``kalman.resetEstimation`` (``MotionCommander``), ``stabilizer.controller`` (``PositionHlCommander``),
``deck.bcFlow2`` / ``deck.bcLighthouse4`` (the examples' deck checks), ``pid_attitude.pitch_kd`` and
``cpu.flash`` (the parameter example), ``supervisor.info``.

Values of a few entries are stored and echoed but do not change the emulated flight; each says so below.
"""

from __future__ import annotations

LOG_TOC: tuple[tuple[str, str, str], ...] = (
    *(("stateEstimate", n, "float") for n in ("x", "y", "z", "vx", "vy", "vz", "qx", "qy", "qz", "qw")),
    *(("stateEstimateZ", n, "int16_t") for n in ("x", "y", "z", "vx", "vy", "vz")),
    ("stateEstimateZ", "quat", "uint32_t"),
    *(("stateEstimateZ", n, "int16_t") for n in ("rateRoll", "ratePitch", "rateYaw")),
    ("gyro", "x", "float"), ("gyro", "y", "float"), ("gyro", "z", "float"),
    ("pm", "vbat", "float"), ("pm", "batteryLevel", "uint8_t"), ("pm", "state", "int8_t"),
    ("stabilizer", "thrust", "float"),
    ("motor", "m1", "uint16_t"), ("motor", "m2", "uint16_t"), ("motor", "m3", "uint16_t"), ("motor", "m4", "uint16_t"),
    ("supervisor", "info", "uint16_t"),
    # Appended after the bridge's entries so their TOC ids stay where they were.
    ("stabilizer", "roll", "float"), ("stabilizer", "pitch", "float"), ("stabilizer", "yaw", "float"),
    ("stateEstimate", "roll", "float"), ("stateEstimate", "pitch", "float"), ("stateEstimate", "yaw", "float"),
    ("kalman", "varPX", "float"), ("kalman", "varPY", "float"), ("kalman", "varPZ", "float"),
    ("range", "zrange", "uint16_t"),
    ("sys", "canfly", "uint8_t"), ("sys", "isFlying", "uint8_t"), ("sys", "isTumbled", "uint8_t"),
)
"""(group, name, C type) of every loggable variable; values come from the vehicle each step.

Angles are in degrees with the firmware's legacy pitch sign (``stabilizer.pitch`` > 0: nose up,
kalman_core.c ``kalmanCoreExternalizeState``); ``kalman.varP*`` is the position variance [m^2] (constant: the
emulator's estimate is the simulator's exact state); ``range.zrange`` is the height in mm as a Flow deck's
downward time-of-flight sensor reports it over a flat floor."""

_PID_ATTITUDE_DEFAULTS = {"roll_kp": 6.0, "roll_ki": 3.0, "roll_kd": 0.0, "pitch_kp": 6.0, "pitch_ki": 3.0,
                          "pitch_kd": 0.0, "yaw_kp": 6.0, "yaw_ki": 1.0, "yaw_kd": 0.35}
"""platform_defaults_cf2.h's attitude PID gains (PID_ROLL_KP, ...)."""

PARAM_TOC: tuple[tuple[str, str, str, float, bool], ...] = (
    ("flightmode", "althold", "uint8_t", 0, False), ("flightmode", "poshold", "uint8_t", 0, False),
    ("flightmode", "posSet", "uint8_t", 0, False), ("flightmode", "yawMode", "uint8_t", 2, False),
    ("flightmode", "stabModeRoll", "uint8_t", 1, False), ("flightmode", "stabModePitch", "uint8_t", 1, False),
    ("flightmode", "stabModeYaw", "uint8_t", 0, False),
    ("stabilizer", "estimator", "uint8_t", 2, False), ("stabilizer", "controller", "uint8_t", 1, False),
    ("stabilizer", "stop", "uint8_t", 0, False),
    ("commander", "enHighLevel", "uint8_t", 1, False),
    ("crtpsrv", "echoDelay", "uint16_t", 0, False),
    ("pm", "lowVoltage", "float", 3.2, False),
    ("firmware", "modified", "uint8_t", 1, True),
    ("kalman", "resetEstimation", "uint8_t", 0, False),
    *(("pid_attitude", n, "float", v, False) for n, v in _PID_ATTITUDE_DEFAULTS.items()),
    ("cpu", "flash", "uint16_t", 1024, True),
    ("deck", "bcFlow2", "uint8_t", 1, True), ("deck", "bcLighthouse4", "uint8_t", 1, True),
    ("deck", "bcMultiranger", "uint8_t", 0, True), ("deck", "bcLoco", "uint8_t", 0, True),
)
"""(group, name, C type, default, read-only) of every parameter.

Wired to the emulated flight: ``flightmode.stabModeRoll/Pitch`` (rate or angle mode of the classic commander),
``stabilizer.stop`` (emergency stop), ``commander.enHighLevel`` (0: the high-level commander feeds no setpoints;
1, the default, as firmware since 2023 always feeds them), ``kalman.resetEstimation`` (counted and cleared as
estimator_kalman.c does; the emulator's estimate is exact, so there is nothing to re-converge).
Stored and echoed only: ``stabilizer.estimator/controller`` and ``pid_attitude.*`` (the emulator flies robot_rl's
:class:`~robot_rl.control.quadrotor.QuadrotorController`, not the firmware's PID or Mellinger controllers),
``flightmode.althold/poshold/posSet/yawMode/stabModeYaw``, ``crtpsrv.echoDelay``, ``pm.lowVoltage``.
Decks: the emulated estimate is an exact absolute position, which a Flow v2 deck (height and planar motion) and a
Lighthouse v4 deck (absolute position) provide on hardware, so both read as attached; Multiranger and Loco read
as absent, so examples that need them stop at their deck check instead of flying without the sensor."""
