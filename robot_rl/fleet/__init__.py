"""Actor <-> learner transport below the learners: framing, authentication, reconnects, the fleet status.

Never imports robot_rl.learners.
"""
