// A step's rank folder is built under a hidden name beside the step folders and renamed into
// place once it is whole (docs/formats.md, "When and how files are written"): a kill -9 leaves
// step<S>/rank<R>/ complete or absent, never a folder of tensors without its dump.json.
//
// The folder being built is <dump_root>/.msprobe_cpp_partial.<R>.<S>.<pid>.<n>/<R>, <S> and <R>
// being the names "step3" and "rank0". A sibling of the step folders rather than a folder inside
// step<S>/: then step<S>/ itself is only ever made by the rename that brings its first rank folder
// (a hidden step<S>/.rank0.partial would make step<S>/ exist, empty to a reader, while rank 0 is
// still writing). One such folder per write, not a shared parent for all: nothing is left to
// remove once a write is published, and no rank races another to make or remove a common parent.
#pragma once

#include <string>

namespace msprobe {

// Where the next write of `folder` ("step<S>/rank<R>") is built: the rank folder, whose parent
// is made for this write alone. Only the name; nothing is created. Thread-safe.
std::string staging_folder(const std::string& dump_root, const std::string& folder);

// Moves the whole rank folder `staged` (from staging_folder) to <dump_root>/<folder>. An earlier
// write of it (the step written again, or a folder of an earlier run) is replaced in one atomic
// swap, so a kill leaves the old folder or the new one, and the old one is then removed. A
// symbolic link where step<S>/ goes is refused. Throws WriteError; `staged` stays as it was.
void publish_folder(const std::string& staged, const std::string& dump_root,
                    const std::string& folder);

// Paths in the order a reader expects step folders: runs of digits compare as numbers, so
// step8 comes before step11 (and rank2 before rank10).
bool natural_less(const std::string& a, const std::string& b);

// Removes `staged` and the parent made for it, whatever they hold (a write that failed).
void discard_staging(const std::string& staged);

// Makes `to`, a file of the folder being built, the same file as `from`, a file of the
// published folder (a hard link; a copy where the file system has none): a step written again
// keeps the tensors its earlier write saved. Throws WriteError.
void link_or_copy(const std::string& from, const std::string& to);

// The folders that staging_folder names for rank folder `rank` ("rank", "rank3") under
// `dump_root`: at a session's first start(), what a killed run of this rank left unfinished.
// Another rank's are not counted (it may be writing them).
bool is_unfinished_folder(const std::string& name, const std::string& rank);
// Removes them; returns how many.
size_t remove_unfinished_folders(const std::string& dump_root, const std::string& rank);

}  // namespace msprobe
