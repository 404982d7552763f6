"""Sim-to-real alignment: measure how the simulator differs from the real robot and correct it.

The workflow (``robot-rl align collect | gap | fit | finetune | eval``): record motions on the real robot
(:mod:`~robot_rl.align.episodes`), replay them open loop in the nominal simulator from the recorded states
(:mod:`~robot_rl.align.replay`), then align the simulator by one of the methods of :mod:`~robot_rl.align.methods`:
system identification, a learnt delta-dynamics residual, or ASAP's delta-action model (He et al., "ASAP:
Aligning Simulation and Real-World Physics for Learning Agile Humanoid Whole-Body Skills", RSS 2025), and
train the task policy in the aligned simulator before flying it on the real robot without the correction.
"""
