"""Sensor sources in the pure core (cameras), shared by ROS nodes, recorders and simulators."""
