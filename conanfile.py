# SPDX-License-Identifier: Apache-2.0
# Conan 2 recipe. loom is header-only: one package for every configuration (empty package id). Its package holds the
# headers and loom's own CMake package (lib/cmake/loom: loomConfig.cmake with the components loom::loom, loom::cuda,
# loom::dist, loom::serve, and FindNCCL.cmake), which consumers' find_package(loom) uses, so a Conan consumer gets
# exactly what an installed prefix gives. The third-party libraries come from the system, not from Conan remotes
# (README: "Conan"):
#   core  nlohmann-json, utf8proc (Debian: nlohmann-json3-dev, libutf8proc-dev), threads
#   cuda  the CUDA toolkit (nvcc, cudart, cuBLAS/cuBLASLt, CUB)
#   dist  MPI and Boost.MPI (openmpi-bin, libopenmpi-dev, libboost-mpi-dev), NCCL with cuda (libnccl-dev or the
#         toolkit's)
#   serve cpp-httplib (libcpp-httplib-dev)
# A component is in the package when its dependencies were found where the package was created.
import os

from conan import ConanFile
from conan.tools.cmake import CMake, CMakeToolchain, cmake_layout
from conan.tools.files import copy


class LoomConan(ConanFile):
    name = "loom"
    version = "0.1.0"
    license = "Apache-2.0"
    description = "Header-only C++20/CUDA tensors, autograd, data/ZeRO/tensor parallelism and BERT training/serving"
    topics = ("tensor", "autograd", "cuda", "bert", "header-only")
    package_type = "header-library"
    settings = "os", "arch", "compiler", "build_type"
    exports_sources = "include/*", "CMakeLists.txt", "cmake/*", "LICENSE"
    no_copy_source = True

    def layout(self):
        cmake_layout(self)

    def package_id(self):
        self.info.clear()

    def generate(self):
        tc = CMakeToolchain(self)
        # The library and its CMake package only: no tests, examples or benchmarks.
        for option in ("LOOM_BUILD_TESTS", "LOOM_BUILD_EXAMPLES", "LOOM_BUILD_BENCH", "LOOM_BUILD_FUZZ"):
            tc.cache_variables[option] = False
        tc.generate()

    def build(self):
        CMake(self).configure()

    def package(self):
        CMake(self).install(component="loom")
        copy(self, "LICENSE", self.source_folder, os.path.join(self.package_folder, "licenses"))

    def package_info(self):
        # CMake consumers use the package's own loomConfig.cmake (it finds CUDA, MPI, NCCL, ...): CMakeDeps writes
        # nothing for loom, and CMakeToolchain puts lib/cmake/loom on the search path.
        self.cpp_info.set_property("cmake_find_mode", "none")
        self.cpp_info.bindirs = []
        self.cpp_info.libdirs = []
        # The same components for other generators (PkgConfigDeps, ...), named as the CMake targets.
        components = {
            "core": ("loom::loom", [], ["utf8proc", "pthread"], []),
            "cuda": ("loom::cuda", ["core"], ["cudart", "cublasLt", "cublas"], ["LOOM_WITH_CUDA_RUNTIME=1"]),
            "dist": ("loom::dist", ["core"], ["mpi", "boost_mpi", "boost_serialization"],
                     ["LOOM_WITH_MPI=1", "OMPI_SKIP_MPICXX=1", "MPICH_SKIP_MPICXX=1"]),
            "serve": ("loom::serve", ["core"], ["cpp-httplib"], []),
        }
        for name, (target, requires, system_libs, defines) in components.items():
            c = self.cpp_info.components[name]
            c.set_property("cmake_target_name", target)
            c.requires = requires
            c.system_libs = system_libs
            c.defines = defines
            c.bindirs = []
            c.libdirs = []
        # With components, the search path comes from theirs: the core's carries loom's CMake package.
        self.cpp_info.components["core"].builddirs = [os.path.join("lib", "cmake", "loom")]
