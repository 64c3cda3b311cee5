#!/usr/bin/env bash
# Makes sure weir's Python environment exists and prints its path.
#
#   tools/python/ensure_env.sh        # called by tools/bazel before Bazel runs
#
# The environment is a virtual environment in
# ${XDG_CACHE_HOME:-~/.cache}/weir/pyenv-<key>, where <key> hashes
# requirements.txt and the interpreter's version: every checkout of the machine
# shares it (like the Bazel disk cache), and a changed pin makes a new one. It
# is built once, under a lock, from the pinned wheels with their hashes
# checked; a finished environment carries the marker file `.weir-complete`, so
# a second call installs nothing (it prints "pyenv: ready" on stderr only when
# it had to build).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
requirements="${here}/requirements.txt"
python="${WEIR_PYTHON:-python3}"

if ! command -v "${python}" >/dev/null 2>&1; then
  echo "pyenv: ${python} not found; install Debian's python3 and python3-venv" >&2
  exit 1
fi

py_version="$("${python}" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
key="$( { cat "${requirements}"; echo "python ${py_version}"; } | sha256sum | cut -c1-16)"
root="${WEIR_PYENV_ROOT:-${XDG_CACHE_HOME:-${HOME}/.cache}/weir}"
env_dir="${root}/pyenv-${key}"

if [[ -f "${env_dir}/.weir-complete" ]]; then
  echo "${env_dir}"
  exit 0
fi

mkdir -p "${root}"
exec 9>"${root}/pyenv.lock"
flock 9
if [[ ! -f "${env_dir}/.weir-complete" ]]; then
  echo "pyenv: creating ${env_dir} (Python ${py_version})" >&2
  rm -rf "${env_dir}"
  if ! "${python}" -m venv "${env_dir}" >&2; then
    echo "pyenv: '${python} -m venv' failed; on Debian install python3-venv" >&2
    exit 1
  fi
  PIP_DISABLE_PIP_VERSION_CHECK=1 "${env_dir}/bin/python" -m pip install -q \
    --require-hashes --no-deps --only-binary=:all: -r "${requirements}" >&2
  touch "${env_dir}/.weir-complete"
  echo "pyenv: ready" >&2
fi
echo "${env_dir}"
