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

pybind11::handle written_buffer(const WrittenArgument& w, pybind11::handle args,
                                pybind11::handle kwargs) {
  if (w.index < 0) return {};
  if (w.index < PyTuple_GET_SIZE(args.ptr())) return PyTuple_GET_ITEM(args.ptr(), w.index);
  if (kwargs) return PyDict_GetItemString(kwargs.ptr(), w.keyword);
  return {};
}

namespace {

std::string rank_text(pybind11::handle rank) {
  if (!rank || !PyLong_Check(rank.ptr())) return "";
  const long r = PyLong_AsLong(rank.ptr());
  if (r == -1 && PythonCrossing::drop_error_if_set()) return "";
  return std::to_string(r);
}

}  // namespace

std::string sent_input_key(const std::string& api, pybind11::handle args,
                           pybind11::handle kwargs) {
  if (api != "Distributed.send") return "";
  pybind11::handle dst;
  if (PyTuple_GET_SIZE(args.ptr()) > 1) {
    dst = PyTuple_GET_ITEM(args.ptr(), 1);
  } else if (kwargs) {
    dst = PyDict_GetItemString(kwargs.ptr(), "dst");
  }
  const std::string r = rank_text(dst);
  return r.empty() ? r : "p2p>" + r;
}

std::string received_key(pybind11::handle source) {
  const std::string r = rank_text(source);
  return r.empty() ? r : "p2p<" + r;
}

}  // namespace msprobe
