// module_hooks.cpp — the thread-local module call hooks (module_hooks.h).
#include "engine/nn/module_hooks.h"

namespace oomlab::nn {
namespace { thread_local const ModuleCallHooks* g_hooks = nullptr; }

ModuleCallHooksGuard::ModuleCallHooksGuard(ModuleCallHooks hooks) : previous_(g_hooks), hooks_(std::move(hooks)) {
  g_hooks = &hooks_;
}

ModuleCallHooksGuard::~ModuleCallHooksGuard() { g_hooks = previous_; }

const ModuleCallHooks* module_call_hooks() { return g_hooks; }

}  // namespace oomlab::nn
