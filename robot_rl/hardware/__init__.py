"""Real robots through their vendors' own protocols, and emulators that speak those protocols.

Pure core (no rclpy): protocol codecs, link clients and the fail-safe logic of each bridge, plus an
emulator per protocol that runs our MuJoCo model behind the same bytes, rates and failure modes, so a
bridge, its launch file and a trained policy are tested end to end exactly as they run on hardware.
The ROS 2 nodes that adapt these to the graph live in :mod:`robot_rl.ros` (``*_bridge_node``).
"""
