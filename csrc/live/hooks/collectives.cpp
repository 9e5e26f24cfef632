#include "live/hooks/collectives.h"

#include <cstring>

#include "live/crossing/python_crossing.h"

namespace msprobe {

WrittenArgument written_argument(const std::string& api) {
  static const char kPrefix[] = "Distributed.";
  if (api.rfind(kPrefix, 0) != 0) return {};
  const std::string name = api.substr(sizeof(kPrefix) - 1);
  struct Row {
    const char* name;
    WrittenArgument arg;
  };
  static const Row kRows[] = {
      {"all_reduce", {0, "tensor", true}},
      {"broadcast", {0, "tensor", true}},  // read on the source rank
      {"reduce", {0, "tensor", true}},
      {"all_gather", {0, "tensor_list"}},
      {"all_gather_into_tensor", {0, "output_tensor"}},
      {"all_gather_single", {0, "output_tensor"}},  // FSDP2's (torch 2.x)
      {"_all_gather_base", {0, "output_tensor"}},
      {"reduce_scatter", {0, "output"}},
      {"reduce_scatter_tensor", {0, "output"}},
      {"reduce_scatter_single", {0, "output"}},  // FSDP2's (torch 2.x)
      {"_reduce_scatter_base", {0, "output"}},
      {"all_to_all", {0, "output_tensor_list"}},
      {"all_to_all_single", {0, "output"}},
      {"scatter", {0, "tensor"}},
      {"gather", {1, "gather_list"}},
      {"recv", {0, "tensor", false, true}},
  };
  for (const Row& r : kRows) {
    if (name == r.name) return r.arg;
  }
  return {};
}

pybind11::handle written_buffer(const WrittenArgument& w, PyObject* args, PyObject* kwargs) {
  if (w.index < 0) return {};
  if (w.index < PyTuple_GET_SIZE(args)) return PyTuple_GET_ITEM(args, w.index);
  if (kwargs) return PyDict_GetItemString(kwargs, w.keyword);
  return {};
}

namespace {

std::string rank_text(PyObject* rank) {
  if (!rank || !PyLong_Check(rank)) return "";
  const long r = PyLong_AsLong(rank);
  if (r == -1 && PythonCrossing::drop_error_if_set()) return "";
  return std::to_string(r);
}

}  // namespace

std::string sent_input_key(const std::string& api, PyObject* args, PyObject* kwargs) {
  if (api != "Distributed.send") return "";
  PyObject* dst = PyTuple_GET_SIZE(args) > 1 ? PyTuple_GET_ITEM(args, 1)
                  : kwargs                   ? PyDict_GetItemString(kwargs, "dst")
                                             : nullptr;
  const std::string r = rank_text(dst);
  return r.empty() ? r : "p2p>" + r;
}

std::string received_key(PyObject* source) {
  const std::string r = rank_text(source);
  return r.empty() ? r : "p2p<" + r;
}

}  // namespace msprobe
