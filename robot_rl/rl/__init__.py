"""Reinforcement learning from scratch in simulation, behind ``robot-rl rl train CONFIG --out DIR``.

* :mod:`robot_rl.rl.config`: the run's typed config (``config/rl/*.yaml``);
* :mod:`robot_rl.rl.envs`: building and checking the vector envs, flattening dict observations;
* :mod:`robot_rl.rl.ppo`: PPO from rsl_rl; :mod:`robot_rl.rl.sac`: SAC with the project's learner;
* :mod:`robot_rl.rl.train`: the one loop (budgets, evaluation, checkpoints, logs);
* :mod:`robot_rl.rl.curves`: the exported policy's evaluations (robot_rl.training.evaluate) and learning curves.

The result is a :class:`robot_rl.policies.mlp.MLPPolicy` checkpoint that ``robot-rl eval`` and the ROS
policy node run like any other policy.
"""
