// core_module.cpp — oomlab._core, the Python package's C++ side (python/oomlab): the CLI's own
// commands (experiments/cli) run in-process under a CommandCapture, so the package answers
// with the same code, checks and messages as `oomlab estimate|summary|plan|step`, no second
// implementation.
// Contracts: run(command, args) takes the command's flags as the CLI does ("--model", "x",
// ...), without --json, and returns (kind, message, results JSON text): kind "" with the
// results, or the failure's kind ("input": a bad argument or file, the CLI's exit 2;
// "unsupported": ops or features oomlab lacks; "oom": out of memory, the CLI's exit 3;
// "internal") and its message, the CLI's error line. The GIL is released while a command
// runs; text the CLI would print is dropped (cli_output.h). Graph files are read afresh
// on every call (a notebook may rewrite one between calls).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <new>
#include <string>
#include <tuple>
#include <vector>

#include "engine/core/error.h"
#include "experiments/cli/cli_output.h"
#include "experiments/cli/commands.h"
#include "experiments/plan/time_model.h"
#include "models/graph_model.h"

namespace py = pybind11;

namespace {
using Outcome = std::tuple<std::string, std::string, std::string>;   // kind, message, results

int dispatch(const std::string& command, const std::vector<std::string>& args) {
  if (command == "estimate") return oomlab::cmd_estimate(args);
  if (command == "summary") return oomlab::cmd_summary(args);
  if (command == "plan") return oomlab::cmd_plan(args);
  if (command == "step") return oomlab::cmd_step(args);   // oomlab.train_step: writes its --out file
  throw oomlab::ValueError("oomlab._core.run: unknown command '" + command + "' (estimate, summary, plan, step)");
}

Outcome run(const std::string& command, const std::vector<std::string>& args) {
  py::gil_scoped_release no_gil;
  oomlab::forget_graph_models();
  oomlab::CommandCapture capture;
  try {
    const int code = dispatch(command, args);
    if (code != 0) return {"internal", command + " exited " + std::to_string(code), ""};
    return {"", "", capture.results.is_null() ? "" : capture.results.dump()};
  } catch (const oomlab::OutOfMemoryError& e) {
    return {"oom", e.what(), ""};
  } catch (const oomlab::NotImplementedError& e) {
    return {"unsupported", e.what(), ""};
  } catch (const oomlab::InternalError& e) {
    return {"internal", e.what(), ""};
  } catch (const oomlab::Error& e) {
    return {"input", e.what(), ""};
  } catch (const std::bad_alloc&) {
    return {"oom", "out of host memory (std::bad_alloc)", ""};
  } catch (const std::exception& e) {
    return {"internal", e.what(), ""};
  }
}
}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "oomlab's C++ core: the CLI's estimate, summary, plan and step commands, in-process";
  m.def("run", &run, py::arg("command"), py::arg("args"),
        "Runs an oomlab command; returns (error kind or '', error message, results JSON).");
  m.def("set_time_model_path", &oomlab::set_time_model_path, py::arg("path"),
        "The plan's time calibration file (before the first plan).");
}
