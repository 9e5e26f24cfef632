// msprobe-cpp: command-line tools of msprobe_cpp.
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "cli/cli.h"

namespace {

// `replay` runs torch ops: it is the Python package's (python -m msprobe_cpp replay), run by
// $MSPROBE_CPP_PYTHON, else the python3 on PATH. Returns only when that cannot be started.
int hand_replay_to_python(int argc, char** argv) {
  const char* chosen = std::getenv("MSPROBE_CPP_PYTHON");
  const std::string python = chosen && *chosen ? chosen : "python3";
  std::vector<std::string> words = {python, "-m", "msprobe_cpp"};
  words.insert(words.end(), argv + 1, argv + argc);
  std::vector<char*> exec_args;
  for (std::string& w : words) exec_args.push_back(w.data());
  exec_args.push_back(nullptr);
  execvp(python.c_str(), exec_args.data());
  std::cerr << "msprobe-cpp replay: cannot run " << python
            << " -m msprobe_cpp replay: " << std::strerror(errno) << "\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args[0] == "replay") return hand_replay_to_python(argc, argv);
  return msprobe::cli_main(args, std::cout, std::cerr, isatty(STDOUT_FILENO) == 1);
}
