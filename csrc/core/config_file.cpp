// Loading config.json from disk: reading the file and JSON syntax errors with line and column.
// Validation itself is in config.cpp.
#include <algorithm>
#include <filesystem>
#include <string>
#include <system_error>

#include "core/config.h"
#include "core/text_file.h"

namespace msprobe {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// Short text of a JSON parse failure: nlohmann's own message without its id and position, which
// load_config_file reports itself.
std::string parse_failure_reason(const std::string& what) {
  std::string reason = what;
  if (reason.rfind("[json.exception.", 0) == 0) {
    size_t close = reason.find("] ");
    if (close != std::string::npos) reason = reason.substr(close + 2);
  }
  if (reason.rfind("parse error", 0) == 0) {
    size_t colon = reason.find(": ");
    if (colon != std::string::npos) reason = reason.substr(colon + 2);
  }
  const std::string syntax = "syntax error while parsing ";
  size_t dash = reason.find(" - ");
  if (reason.rfind(syntax, 0) == 0 && dash != std::string::npos) reason = reason.substr(dash + 3);
  return reason;
}

// Where the byte nlohmann reports is: the last one it read, counted from 1.
TextPosition error_position(const std::string& text, size_t byte) {
  TextPosition p;
  p.advance(text.data(), text.data() + std::min(byte > 0 ? byte - 1 : 0, text.size()));
  return p;
}

// Builds the document like json::parse, but keeps the position of every failure: json::parse
// throws number overflows ("1e400") as out_of_range, which carries no position.
class PositionedParser {
 public:
  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) { return dom_.number_integer(v); }
  bool number_unsigned(json::number_unsigned_t v) { return dom_.number_unsigned(v); }
  bool number_float(json::number_float_t v, const std::string& s) {
    return dom_.number_float(v, s);
  }
  bool string(std::string& v) { return dom_.string(v); }
  bool binary(json::binary_t& v) { return dom_.binary(v); }
  bool start_object(std::size_t n) { return dom_.start_object(n); }
  bool key(std::string& v) { return dom_.key(v); }
  bool end_object() { return dom_.end_object(); }
  bool start_array(std::size_t n) { return dom_.start_array(n); }
  bool end_array() { return dom_.end_array(); }
  bool parse_error(std::size_t position, const std::string& /*token*/,
                   const nlohmann::detail::exception& error) {
    error_position_ = position;
    error_ = error.what();
    return false;
  }

  json& result() { return result_; }
  size_t error_position() const { return error_position_; }
  const std::string& error() const { return error_; }

 private:
  json result_;
  nlohmann::detail::json_sax_dom_parser<json> dom_{result_, false};
  size_t error_position_ = 0;
  std::string error_;
};

json parse_json_text(const std::string& text, const std::string& path) {
  PositionedParser parser;
  if (json::sax_parse(text, &parser)) return std::move(parser.result());
  const TextPosition at = error_position(text, parser.error_position());
  throw ConfigError(path + ":" + std::to_string(at.line) + ":" + std::to_string(at.column) +
                    ": invalid JSON: " + parse_failure_reason(parser.error()));
}

// Relative rule files are found next to the config; an absolute folder keeps that true even if
// the training script changes directory later.
std::string config_dir(const std::string& path) {
  std::error_code ec;
  fs::path absolute = fs::absolute(path, ec);
  return (ec ? fs::path(path) : absolute).parent_path().string();
}

}  // namespace

// A config file's text; one that cannot be read is a ConfigError naming `what` it is.
static std::string read_config_text(const std::string& path, const char* what) {
  try {
    return read_text_file(path);
  } catch (const FileError& e) {
    throw ConfigError(path + ": cannot read " + what + ": " + e.reason());
  }
}

Config load_config_file(const std::string& path, const nlohmann::json& overrides) {
  return parse_config_text(read_config_text(path, "config file"), path, overrides,
                           config_dir(path));
}

Config load_monitor_config_file(const std::string& path, const std::string& output_root) {
  Config config;
  config.task = Task::Monitor;
  config.dump_path = output_root;
  config.monitor = parse_monitor_config(
      parse_json_text(read_config_text(path, "the monitor's config file"), path), path);
  return config;
}

Config parse_config_text(const std::string& text, const std::string& source,
                         const nlohmann::json& overrides, const std::string& base_dir) {
  json doc = parse_json_text(text, source);
  return parse_config(doc, source, overrides, base_dir);
}

}  // namespace msprobe
