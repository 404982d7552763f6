"""One module per task; :mod:`robot_rl.sim` registers them with Gymnasium."""
