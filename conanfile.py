# SPDX-License-Identifier: Apache-2.0
# Conan 2 recipe: loom is header-only; the CUDA toolkit, NCCL and MPI are system prerequisites (see README).
from conan import ConanFile
from conan.tools.cmake import CMake, CMakeToolchain, cmake_layout
from conan.tools.files import copy
import os


class LoomConan(ConanFile):
    name = "loom"
    version = "0.1.0"
    license = "Apache-2.0"
    description = "Header-only C++20/CUDA tensors, autograd and BERT training/serving"
    package_type = "header-library"
    settings = "os", "arch", "compiler", "build_type"
    exports_sources = "include/*", "CMakeLists.txt", "cmake/*", "LICENSE"
    no_copy_source = True

    def layout(self):
        cmake_layout(self)

    def package_id(self):
        self.info.clear()

    def package(self):
        copy(self, "LICENSE", self.source_folder, os.path.join(self.package_folder, "licenses"))
        copy(self, "*.hpp", os.path.join(self.source_folder, "include"), os.path.join(self.package_folder, "include"))
        copy(self, "*.cuh", os.path.join(self.source_folder, "include"), os.path.join(self.package_folder, "include"))

    def package_info(self):
        self.cpp_info.set_property("cmake_file_name", "loom")
        self.cpp_info.set_property("cmake_target_name", "loom::loom")
        self.cpp_info.bindirs = []
        self.cpp_info.libdirs = []
        self.cpp_info.components["core"].set_property("cmake_target_name", "loom::loom")
        self.cpp_info.components["core"].bindirs = []
        self.cpp_info.components["core"].libdirs = []
        self.cpp_info.components["cuda"].set_property("cmake_target_name", "loom::cuda")
        self.cpp_info.components["cuda"].requires = ["core"]
        self.cpp_info.components["cuda"].defines = ["LOOM_WITH_CUDA_RUNTIME=1"]
        self.cpp_info.components["cuda"].system_libs = ["cudart", "cublasLt", "cublas"]
        self.cpp_info.components["cuda"].bindirs = []
        self.cpp_info.components["cuda"].libdirs = []
