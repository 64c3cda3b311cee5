"""Repositories over weir's Python environment (tools/python/ensure_env.sh).

tools/bazel exports WEIR_PYENV, the environment's path, before Bazel starts;
its name hashes the pinned requirements, so a changed pin re-fetches these
repositories. Bazel run without tools/bazel gets a clear error from the first
target that needs them, and nothing else is affected.
"""

def _pyenv_path(ctx):
    path = ctx.os.environ.get("WEIR_PYENV", "")
    if not path:
        fail("WEIR_PYENV is not set: run Bazel through tools/bazel, which creates " +
             "the Python environment (tools/python/ensure_env.sh) and sets it")
    if not ctx.path(path + "/.weir-complete").exists:
        fail("WEIR_PYENV=%s is not a finished weir Python environment" % path)
    return path

def _site_packages(ctx, env):
    result = ctx.execute([env + "/bin/python", "-c",
                          "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
    if result.return_code != 0:
        fail("cannot run the Python environment's interpreter: " + result.stderr)
    return result.stdout.strip()

def _weir_pyenv_impl(ctx):
    env = _pyenv_path(ctx)
    # A wrapper, not a symlink: a virtual environment's interpreter must be
    # started through its own path to find pyvenv.cfg.
    # The file is python.sh: a source file named like the rule would make the
    # rule its own source. The runfiles hold the executable as pyenv/python.
    ctx.file("python.sh", "#!/bin/sh\nexec '%s/bin/python' \"$@\"\n" % env, executable = True)
    ctx.file("BUILD.bazel", """
package(default_visibility = ["//visibility:public"])

# The project's Python interpreter with the pinned packages
# (tools/python/requirements.txt).
sh_binary(
    name = "python",
    srcs = ["python.sh"],
)
""")

weir_pyenv = repository_rule(
    implementation = _weir_pyenv_impl,
    environ = ["WEIR_PYENV"],
    local = True,
)

def _weir_cutlass_impl(ctx):
    env = _pyenv_path(ctx)
    source = _site_packages(ctx, env) + "/cutlass_library/source"
    for sub in ["include", "tools/util/include"]:
        if not ctx.path(source + "/" + sub).exists:
            fail("the nvidia-cutlass wheel in %s has no %s" % (env, sub))
    ctx.symlink(source + "/include", "include")
    ctx.symlink(source + "/tools/util/include", "util_include")
    ctx.file("BUILD.bazel", """
package(default_visibility = ["//visibility:public"])

# CUTLASS / CuTe headers from the pinned nvidia-cutlass wheel. weir_cuda_library
# adds -Iexternal/cutlass/include -Iexternal/cutlass/util_include when a
# library sets cutlass = True.
filegroup(
    name = "headers",
    srcs = glob([
        "include/cute/**",
        "include/cutlass/**",
        "util_include/cutlass/**",
    ]),
)
""")

weir_cutlass = repository_rule(
    implementation = _weir_cutlass_impl,
    environ = ["WEIR_PYENV"],
    local = True,
)
