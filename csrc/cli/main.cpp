// msprobe-cpp: command-line tools of msprobe_cpp.
#include <iostream>
#include <string>
#include <vector>

#include "cli/cli.h"

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  return msprobe::cli_main(args, std::cout, std::cerr);
}
