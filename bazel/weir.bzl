"""Thin project macros: copts, the shared test main, protos and CUDA objects.

No logic lives here beyond naming conventions; see README.md "Build".
"""

WEIR_COPTS = [
    "-Wall",
    "-Wextra",
    "-Wno-unused-parameter",
    "-Wno-missing-field-initializers",
    "-Werror=return-type",
]

def weir_cc_library(name, copts = [], **kwargs):
    native.cc_library(name = name, copts = WEIR_COPTS + copts, **kwargs)

def weir_cc_binary(name, copts = [], **kwargs):
    native.cc_binary(name = name, copts = WEIR_COPTS + copts, **kwargs)

def weir_cc_test(name, copts = [], deps = [], size = "small", linkstatic = True, **kwargs):
    """A gtest binary linked with GoogleTest's main.

    Project libraries are linked statically so a test binary can be copied to
    another machine (tools/gpu/bundle.sh) with only system libraries beside it.
    """
    native.cc_test(
        name = name,
        copts = WEIR_COPTS + copts,
        size = size,
        linkstatic = linkstatic,
        deps = deps + ["@system//:gtest_main"],
        **kwargs
    )

def weir_proto_library(name, srcs, proto_deps = [], grpc = True, visibility = None):
    """Generates C++ (and gRPC) code for `srcs` with the system protoc.

    Creates `<name>` (a cc_library). `proto_deps` are other weir_proto_library
    names whose .proto files `srcs` import. Imports are rooted at the
    workspace: `import "proto/common.proto";`.
    """
    outs = []
    for src in srcs:
        base = src[:-len(".proto")]
        outs += [base + ".pb.h", base + ".pb.cc"]
        if grpc:
            outs += [base + ".grpc.pb.h", base + ".grpc.pb.cc"]
    dep_srcs = [d + "_srcs" for d in proto_deps]
    native.filegroup(
        name = name + "_srcs",
        srcs = srcs + dep_srcs,
        visibility = visibility,
    )
    pkg = native.package_name()
    grpc_flags = ""
    if grpc:
        grpc_flags = "--grpc_out=$(GENDIR) --plugin=protoc-gen-grpc=$$(command -v grpc_cpp_plugin) "
    native.genrule(
        name = name + "_gen",
        srcs = srcs + dep_srcs,
        outs = outs,
        cmd = "protoc -I. --cpp_out=$(GENDIR) " + grpc_flags +
              " ".join([pkg + "/" + s for s in srcs]),
    )
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        deps = proto_deps + ["@system//:grpc", "@system//:protobuf"],
        visibility = visibility,
    )

def weir_cuda_library(name, srcs, hdrs = [], deps = [], cuda_hdrs = [], cutlass = False, visibility = None, **kwargs):
    """Compiles each .cu in `srcs` with nvcc for sm_90a into an object file
    and wraps the objects, `hdrs` and the static CUDA runtime in a cc_library.

    Compiles and links on machines without a GPU; the code runs on Hopper.
    `cuda_hdrs` are headers (.cuh, .h) the .cu files include. `cutlass = True`
    puts the CUTLASS/CuTe headers (@cutlass, from the pinned Python
    environment) on the include path.
    """
    extra_srcs = []
    extra_flags = ""
    if cutlass:
        extra_srcs = ["@cutlass//:headers"]
        extra_flags = ("-Iexternal/cutlass/include -Iexternal/cutlass/util_include " +
                       "--expt-relaxed-constexpr ")
    objs = []
    for src in srcs:
        obj = src[:-len(".cu")] + ".cu.o"
        objs.append(obj)
        native.genrule(
            name = name + "_" + src.replace("/", "_").replace(".", "_"),
            srcs = [src] + hdrs + cuda_hdrs + ["@cuda//:headers"] + extra_srcs,
            outs = [obj],
            tools = ["@cuda//:nvcc"],
            cmd = ("$(location @cuda//:nvcc) -std=c++20 -O3 " +
                   "-gencode=arch=compute_90a,code=sm_90a " +
                   "-Xcompiler -fPIC " + extra_flags + "-I. -I$(GENDIR) -c $(location " + src + ") -o $@"),
        )
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps + ["@cuda//:cudart_static"],
        visibility = visibility,
        **kwargs
    )

def weir_layering_scope(name = "layering_scope"):
    """Names every rule declared above it in the package, for //tests/layering.

    genquery accepts no recursive patterns and only queries targets reachable
    from its `scope`, so each package whose dependencies the layering test
    checks ends its BUILD file with this call. A rule declared after it is
    outside the scope, and the layering test then fails to build, naming it.
    """
    native.filegroup(
        name = name,
        testonly = True,
        srcs = [":" + r for r in sorted(native.existing_rules().keys())],
        tags = ["manual"],
        visibility = ["//tests/layering:__pkg__"],
    )

def weir_kernel_sources(name = "kernel_sources"):
    """The package's CUDA sources (.cu, .cuh) as a filegroup for
    //kernels/cuda:grid_dependency_test, which checks every kernel's prologue."""
    native.filegroup(
        name = name,
        srcs = native.glob(["*.cu", "*.cuh"]),
        visibility = ["//kernels/cuda:__pkg__"],
    )
