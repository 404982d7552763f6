"""ArmMultiTask: one Panda scene, several tasks, and only a natural-language instruction says which one to do.

The scene holds a red cube, a blue cube (both 5 cm, non-overlapping, in the cube range of the one-task envs)
and the green goal ball floating above the table. Per episode one task of :data:`TASKS` is drawn; its
instruction is ``env.unwrapped.instruction`` and ``info["instruction"]`` at reset. The layout is drawn
before the task and never depends on it, so one seed gives the same cubes and ball whatever the task:
swapping the instruction on one scene tests that a policy's behaviour follows the language, and
``lift_red`` / ``lift_blue`` differ in nothing else. Success and reward are those of ArmReach (tcp to the
ball), ArmPush (the cube under the ball: horizontal distance, as ArmPush's) and ArmPickLift (the named cube
10 cm up), applied to the episode's target; moving the other cube counts for nothing.

``reset(options={"task": "lift_blue"})`` forces a task; ``gym.make(id, tasks=[...])`` restricts the drawn set.
The observation is ArmPickLift's with ``object_pos``/``object_quat`` naming the TARGET (reach: the ball, with
the identity orientation), so privileged labels and the experts read one key, plus each cube by colour and
``task_id`` (an index into :data:`TASKS`, privileged: a language policy gets the instruction instead).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from robot_rl.core import FieldSpec, SpecError
from robot_rl.core.config import ConfigError
from robot_rl.robots import scenes
from robot_rl.sim.base_env import ConfigSource
from robot_rl.sim.envs.arm_base import ArmEnv, sample_cube_pose
from robot_rl.sim.envs.arm_pick_lift import finger_body_ids, fingers_touching, lift_success, lift_terms
from robot_rl.sim.envs.arm_push import push_success, push_terms, sample_push_goal
from robot_rl.sim.envs.arm_reach import reach_success, reach_terms

REACH, PUSH, LIFT = "reach", "push", "lift"
"""Task kinds: whose success, reward and expert a task uses."""
RED, BLUE = "red", "blue"
"""Cube names, as the instructions say them."""


@dataclass(frozen=True)
class ArmTask:
    """One named task of the multi-task scene."""

    name: str
    kind: str
    """:data:`REACH`, :data:`PUSH` or :data:`LIFT`."""
    cube: str
    """The target cube (:data:`RED` or :data:`BLUE`); empty for reach, whose target is the ball."""
    instruction: str
    """What the policy is told."""


TASKS: tuple[ArmTask, ...] = (
    ArmTask("reach", REACH, "", "reach the green ball"),
    ArmTask("push_red", PUSH, RED, "push the red cube under the green ball"),
    ArmTask("lift_red", LIFT, RED, "pick up the red cube and lift it"),
    ArmTask("lift_blue", LIFT, BLUE, "pick up the blue cube and lift it"),
)
"""The fixed task set; ``task_id`` indexes it, so its order must never change (append new tasks)."""
TASK_NAMES = tuple(t.name for t in TASKS)
TASK_ID_KEY = "task_id"
TERM_NAMES = ("distance", "reach", "push", "grasp", "lift", "success")
"""Every task's reward terms, reported for every episode (0 when the task has no such term), so that
vectorised logging sees one set of keys."""

GOAL_HEIGHT_RANGE = (0.1, 0.3)
"""Height of the green ball above the table [m] (inside ArmReach's goal heights; push only uses its x, y)."""
MIN_CUBE_SPACING = 0.1
"""Closest centre distance of the two cubes [m]: open fingers around one clear the other."""
PUSH_APPROACH = 0.06
"""How far behind the red cube the pushing hand starts [m] (the push expert's standoff plus a margin)."""
PUSH_PATH_CLEARANCE = 0.075
"""Closest the blue cube's centre comes to the red cube's push path [m]: two half diagonals and a margin,
so pushing the red cube under the ball never runs into the blue one."""
MAX_LAYOUT_TRIES = 1000
"""Layouts drawn before giving up (about one in three is accepted)."""
IDENTITY_QUAT = np.array([1.0, 0.0, 0.0, 0.0])


def task_named(name: str) -> ArmTask:
    """The task called ``name``; SpecError naming the known ones otherwise."""
    for task in TASKS:
        if task.name == name:
            return task
    raise SpecError(f"task: unknown {name!r}; expected one of {TASK_NAMES}")


def _check_tasks(tasks: Sequence[str] | str | None) -> tuple[ArmTask, ...]:
    """The drawn set: all of :data:`TASKS` by default; a string is a comma-separated list (``--override``)."""
    if tasks is None:
        return TASKS
    names = [n.strip() for n in tasks.split(",") if n.strip()] if isinstance(tasks, str) else list(tasks)
    unknown = [n for n in names if n not in TASK_NAMES]
    if not names or unknown or len(set(names)) != len(names):
        raise ConfigError(f"tasks: expected distinct names from {TASK_NAMES}, got {names}")
    return tuple(task_named(n) for n in names)


def _segment_distance(p: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    """Distance from point ``p`` to the segment a-b (2-D)."""
    ab = b - a
    t = float(np.clip((p - a) @ ab / max(float(ab @ ab), 1e-12), 0.0, 1.0))
    return float(np.linalg.norm(p - (a + t * ab)))


def layout_ok(red_xy: np.ndarray, blue_xy: np.ndarray, goal_xy: np.ndarray) -> bool:
    """Every task is feasible: the cubes are apart and the blue one is off the red one's push path."""
    if np.linalg.norm(red_xy - blue_xy) < MIN_CUBE_SPACING:
        return False
    u = (goal_xy - red_xy) / max(float(np.linalg.norm(goal_xy - red_xy)), 1e-9)
    return _segment_distance(blue_xy, red_xy - PUSH_APPROACH * u, goal_xy) >= PUSH_PATH_CLEARANCE


def sample_layout(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Red and blue cube qpos (x y z, qw qx qy qz) and the ball's position, drawn as one scene.

    The ball's x, y is a push goal for the red cube (ArmPush's distribution), its height a reach goal's.
    """
    for _ in range(MAX_LAYOUT_TRIES):
        red = sample_cube_pose(rng)
        goal = np.r_[sample_push_goal(red[:2], rng), rng.uniform(*GOAL_HEIGHT_RANGE)]
        blue = sample_cube_pose(rng)
        if layout_ok(red[:2], blue[:2], goal[:2]):
            return red, blue, goal
    raise RuntimeError(f"no feasible two-cube layout in {MAX_LAYOUT_TRIES} draws")  # pragma: no cover


class ArmMultiTaskEnv(ArmEnv):
    """Reward terms: those of the episode's task (:data:`TERM_NAMES`, the others 0); success per task."""

    WITH_OBJECT = True
    SECOND_OBJECT = True

    def __init__(self, config: ConfigSource = None, render_mode: str | None = None,
                 tasks: Sequence[str] | str | None = None, **overrides: Any) -> None:
        self.tasks = _check_tasks(tasks)
        """The tasks an episode draws from (a forced task may be any of :data:`TASKS`)."""
        self.task = self.tasks[0]
        """The episode's task."""
        super().__init__(config, render_mode, **overrides)
        # both cubes take the same colour shift, so red stays redder than blue (the instruction names colours)
        self.appearance.object_geoms = np.flatnonzero(np.isin(self.model.geom_bodyid, list(self.cube_body.values())))

    def _setup(self) -> None:
        super()._setup()
        m = self.model
        blue = int(m.jnt_qposadr[m.joint(scenes.SECOND_OBJECT_JOINT).id])
        self.cube_qpos = {RED: self.obj_qpos, BLUE: slice(blue, blue + 7)}
        self.cube_body = {RED: self.obj_body, BLUE: m.body(scenes.SECOND_OBJECT_BODY).id}
        self.finger_bodies = finger_body_ids(m)

    @property
    def instruction(self) -> str:
        """The episode's task in words: what a language-conditioned policy is given."""
        return self.task.instruction

    @property
    def task_index(self) -> int:
        """The episode's task as an index into :data:`TASKS` (the ``task_id`` observation)."""
        return TASKS.index(self.task)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """As every env's reset; ``options["task"]`` forces a task, and info names the task and instruction."""
        obs, info = super().reset(seed=seed, options=options)
        info.update(task=self.task.name, instruction=self.instruction)
        return obs, info

    def _reset_task(self, rng: np.random.Generator, options: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        qpos = self._initial_arm_qpos(rng)
        red, blue, self.goal = sample_layout(rng)
        qpos[self.cube_qpos[RED]], qpos[self.cube_qpos[BLUE]] = red, blue
        drawn = self.tasks[int(rng.integers(len(self.tasks)))]  # drawn even when forced: later draws stay aligned
        forced = options.get("task")
        self.task = drawn if forced is None else task_named(str(forced))
        return qpos, np.zeros(self.model.nv)

    # ---- state ----------------------------------------------------------------------------------
    def cube_pos(self, cube: str) -> np.ndarray:
        """Centre of the ``cube`` (red or blue) [m]."""
        return self.data.qpos[self.cube_qpos[cube]][:3].copy()

    def object_pos(self) -> np.ndarray:
        """The episode's target: its cube's centre, or the ball for reach [m]."""
        return self.cube_pos(self.task.cube) if self.task.cube else self.goal.copy()

    def _target_quat(self) -> np.ndarray:
        return self.data.qpos[self.cube_qpos[self.task.cube]][3:].copy() if self.task.cube else IDENTITY_QUAT

    # ---- observation ----------------------------------------------------------------------------
    def _task_fields(self) -> dict[str, FieldSpec]:
        f = {"object_pos": FieldSpec((3,), description="the task's target: its cube's centre (reach: the goal "
                                                        "ball), base frame [m]"),
             "object_quat": FieldSpec((4,), description="the target cube's orientation, wxyz (reach: identity)"),
             "goal_pos": FieldSpec((3,), description="green ball, base frame [m]")}
        for cube in (RED, BLUE):
            f[f"{cube}_cube_pos"] = FieldSpec((3,), description=f"{cube} cube centre, base frame [m]")
            f[f"{cube}_cube_quat"] = FieldSpec((4,), description=f"{cube} cube orientation, wxyz")
        f[TASK_ID_KEY] = FieldSpec((1,), low=0.0, high=float(len(TASKS) - 1),
                                   description="index of the task in TASKS (privileged: the instruction says it)")
        return f

    def _task_observation(self) -> dict[str, np.ndarray]:
        obs = {"object_pos": self.object_pos(), "object_quat": self._target_quat(), "goal_pos": self.goal}
        for cube in (RED, BLUE):
            obs[f"{cube}_cube_pos"] = self.cube_pos(cube)
            obs[f"{cube}_cube_quat"] = self.data.qpos[self.cube_qpos[cube]][3:]
        obs[TASK_ID_KEY] = np.array([float(self.task_index)])
        return obs

    def _full_observation(self) -> dict[str, np.ndarray]:
        obs = super()._full_observation()
        obs[TASK_ID_KEY] = np.array([self.task_index], dtype=np.float32)  # an index: never observation noise
        return obs

    # ---- reward and success ---------------------------------------------------------------------
    def _reward_terms(self) -> dict[str, float]:
        tcp = self.data.site_xpos[self.tcp]
        kind = self.task.kind
        if kind == REACH:
            terms = reach_terms(tcp, self.goal)
        elif kind == PUSH:
            terms = push_terms(tcp, self.object_pos(), self.goal)
        else:
            touching = fingers_touching(self.model, self.data, self.cube_body[self.task.cube], self.finger_bodies)
            terms = lift_terms(tcp, self.object_pos(), touching)
        return {**dict.fromkeys(TERM_NAMES, 0.0), **terms}

    def _is_success(self) -> bool:
        kind = self.task.kind
        if kind == REACH:
            return reach_success(self.data.site_xpos[self.tcp], self.goal)
        if kind == PUSH:
            return push_success(self.object_pos(), self.goal)
        return lift_success(self.object_pos())
