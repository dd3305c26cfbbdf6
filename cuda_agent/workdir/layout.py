"""The workdir form's fixed files, written for this project: the binding infrastructure every workspace of the
released CUDA Agent environment shares (``binding.cpp`` + ``binding_registry.h``).

A candidate's kernels/*_binding.cpp defines torch-facing functions and registers them with
``REGISTER_BINDING(name, fn)``, where ``fn(pybind11::module&)`` adds its definitions to the module; binding.cpp
defines the module (``cuda_extension``) and applies every registration. The platform builds these two files itself,
so a candidate cannot change how its module is created.
"""

from __future__ import annotations

from cuda_agent.contracts.candidate import (
    EXTENSION_MODULE,
    WORKDIR_BINDING_FILE,
    WORKDIR_REGISTRY_HEADER,
)

REGISTRY_HEADER_TEXT = """\
// Supplied by the platform (cuda-agent workdir form); a candidate's copy of this file is never built.
#pragma once

#include <torch/extension.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

// Every kernels/*_binding.cpp registers a function that adds its definitions to the module; binding.cpp applies
// them all when Python imports the module.
class __attribute__((visibility("hidden"))) BindingRegistry {  // as pybind11's types: one .so
 public:
  using BindingFunction = std::function<void(pybind11::module&)>;

  // One registry per shared object: a function-local static of an inline function is merged across units.
  static BindingRegistry& getInstance() {
    static BindingRegistry registry;
    return registry;
  }

  void registerBinding(const std::string& name, BindingFunction function) {
    bindings_.emplace_back(name, std::move(function));
  }

  void applyBindings(pybind11::module& module) {
    for (auto& binding : bindings_) binding.second(module);
  }

 private:
  std::vector<std::pair<std::string, BindingFunction>> bindings_;
};

// Registers at load time, before binding.cpp's module init runs: REGISTER_BINDING(my_op, register_my_op);
#define REGISTER_BINDING(name, function)                                          \\
  static const bool cuda_agent_binding_registered_##name =                        \\
      (BindingRegistry::getInstance().registerBinding(#name, function), true)
"""

BINDING_TEXT = f"""\
// Supplied by the platform (cuda-agent workdir form); a candidate's copy of this file is never built.
#include <torch/extension.h>

#include "{WORKDIR_REGISTRY_HEADER}"

// TORCH_EXTENSION_NAME is {EXTENSION_MODULE}, as torch.utils.cpp_extension.load(name="{EXTENSION_MODULE}") sets it.
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{ BindingRegistry::getInstance().applyBindings(m); }}
"""

PLATFORM_FILES: dict[str, str] = {WORKDIR_BINDING_FILE: BINDING_TEXT, WORKDIR_REGISTRY_HEADER: REGISTRY_HEADER_TEXT}
# How a kernel file reaches the registry header: by the path relative to kernels/ or through the include path.
REGISTRY_INCLUDES = frozenset({f"../{WORKDIR_REGISTRY_HEADER}", WORKDIR_REGISTRY_HEADER})
