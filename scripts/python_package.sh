#!/usr/bin/env bash
# The Python package's check (issue 55), a step of scripts/test.sh: the wheel built once with
# `pip wheel .` (scikit-build-core builds the module oomlab._core in the test build's dir,
# reusing its libraries), installed into a venv of its own ($build_dir/python-venv, with
# pytest, scikit-build-core and pybind11 from PyPI), then tests/python run against the
# installed package, not the source tree.
# Environment: OOMLAB_BUILD_DIR (default: build; pip builds the module there),
#   OOMLAB_PACKAGE_PYTHON (the venv's interpreter, default python3; a venv with
#   PyTorch and torchvision, OOMLAB_PACKAGE_VENV, runs the torch tests too).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="$(realpath -m "${OOMLAB_BUILD_DIR:-build}")"
venv="$(realpath -m "${OOMLAB_PACKAGE_VENV:-$build_dir/python-venv}")"
wheels="$build_dir/wheels"
if [[ ! -x "$venv/bin/python" ]]; then
  "${OOMLAB_PACKAGE_PYTHON:-python3}" -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check pytest scikit-build-core pybind11
rm -rf "$wheels"
# no build isolation: an isolated build's new path each time would make scikit-build-core clear
# the build dir's objects (its cmake.py: "New isolated environment ..., clearing cache")
"$venv/bin/python" -m pip wheel -q --disable-pip-version-check --no-deps --no-build-isolation \
  -C build-dir="$build_dir" -w "$wheels" .
"$venv/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$wheels"/oomlab-*.whl
# from outside the source tree: `import oomlab` must find the installed package
root="$PWD"
cd "$build_dir" && OOMLAB_BUILD_DIR="$build_dir" "$venv/bin/python" -m pytest -q -p no:cacheprovider "$root/tests/python"
