# tests/python_env.sh — sourced (not run) by the sh_tests that run Python from
# the pinned environment: finds the weir workspace and @pyenv//:python in the
# runfiles, and puts tests/ (weir_cluster.py) on PYTHONPATH.
#
#   source "${TEST_SRCDIR:?run through bazel test}/weir/tests/python_env.sh"
#
# Sets:
#   runfiles  the weir workspace in the runfiles
#   python    @pyenv//:python, or "" when it is not in the runfiles (the caller
#             decides how to fail)
# Exports PYTHONDONTWRITEBYTECODE=1, WEIR_RUNFILES_ROOT=$runfiles and
# PYTHONPATH=$runfiles/tests (prepended). Defines weir_require_python and
# weir_require_binaries (below).

_weir_srcdir="${TEST_SRCDIR:-${RUNFILES_DIR:-$0.runfiles}}"
runfiles="${_weir_srcdir}/${TEST_WORKSPACE:-weir}"

# @pyenv//:python: the external repository sits at the runfiles top level, or
# under weir/external with legacy external runfiles.
python=""
for candidate in "${_weir_srcdir}/pyenv/python" "${runfiles}/external/pyenv/python"; do
  if [[ -x "${candidate}" ]]; then
    python="${candidate}"
    break
  fi
done
unset candidate

export PYTHONDONTWRITEBYTECODE=1
export WEIR_RUNFILES_ROOT="${runfiles}"
export PYTHONPATH="${runfiles}/tests${PYTHONPATH:+:${PYTHONPATH}}"

# Exits 1, naming the caller ($0), when @pyenv//:python is not in the runfiles.
weir_require_python() {
  if [[ -z "${python}" ]]; then
    echo "$(basename "$0"): @pyenv//:python not found in the runfiles" >&2
    exit 1
  fi
}

# Exits 1 naming the first of the workspace-relative binaries "$@" that is not
# an executable in the runfiles.
weir_require_binaries() {
  local binary
  for binary in "$@"; do
    if [[ ! -x "${runfiles}/${binary}" ]]; then
      echo "$(basename "$0"): ${binary} not found in the runfiles" >&2
      exit 1
    fi
  done
}
