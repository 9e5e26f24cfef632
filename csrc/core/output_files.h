// Files of a dump: created atomically (temp file + rename) so a killed job never leaves a
// truncated dump.json, with permissions fit for model data (folders 0750, files 0640).
#pragma once

#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <vector>

#include "core/step_ticket.h"

namespace msprobe {

class WriteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws a WriteError naming `path`, what was being done, and errno's text.
[[noreturn]] void fail_write(const std::string& path, const char* what);

// mkdir -p with mode 0750 for the folders it creates. Below `trusted_root` (dump_path, which may
// itself be a link the user made) a symbolic link is refused with a WriteError.
void make_dirs(const std::string& path, const std::string& trusted_root = "");

// Writes `text` to `path` via a temporary file in the same folder, then renames it into place.
// On failure nothing is left: no temporary, no partial file.
void write_file_atomic(const std::string& path, const std::string& text);

// Appends `text` to a file that several processes append to (every rank's rows in one CSV). The
// file appears with `header` already in it, whichever process gets there first, and `text` goes in
// with one O_APPEND write, so no two processes' lines interleave and no line comes before the
// header.
void append_to_shared_file(const std::string& path, const std::string& header,
                           const std::string& text);

// Removes `folder` and then each parent above it, up to but not including `root`, for as long as
// they are empty: what a step that could not be written leaves behind.
void remove_empty_folders(const std::string& folder, const std::string& root);

// For tests of a full disk: write_file_atomic fails with ENOSPC once `bytes` more have been
// written (by every thread together); a negative value lifts the limit.
void set_write_budget_for_testing(long long bytes);

// A file name made from call and module names (which a user's `setattr(model, "../x", m)` or a
// NUL can reach), safe as one component of a path: '/', '\\', NUL and control characters become
// '_', and a name over 200 bytes is cut and given a checksum of the whole, so two long names stay
// apart.
std::string safe_file_stem(const std::string& stem);

// The file stems given out in one step: a stem already given (two names that became the same
// when made safe) gets "~2", "~3", ... so no file overwrites another. Thread-safe.
// The tensor files of a step, in its dump_tensor_data/ folder. Thread-safe.
class FileNames {
 public:
  // With `tickets`, the names of the last step are let go at the first claim of the next.
  explicit FileNames(const StepTickets* tickets = nullptr) : step_(tickets) {}
  std::string claim(const std::string& stem);  // safe_file_stem(stem), made unique
  // Each stem claimed in order, under one lock (a flagged call's evidence, all at once).
  std::vector<std::string> claim_all(const std::vector<std::string>& stems);
  void clear();                                // a new step
  void set_dir(std::string dir);               // the step's folder, once its rank is known
  std::string dir() const;

 private:
  mutable std::mutex mu_;
  StepLocal step_;
  std::unordered_set<std::string> used_;
  std::string dir_;
};

// The temporaries write_file_atomic leaves when a run is killed mid-write: "<file>.tmp.<6 letters
// and digits>" (mkstemp's), or "<file>.tmp.<pid>" of older versions.
bool is_temporary_name(const std::string& file_name);
// Removes such files anywhere under `root` (links are not followed); returns how many.
size_t remove_stale_temporaries(const std::string& root);

}  // namespace msprobe
