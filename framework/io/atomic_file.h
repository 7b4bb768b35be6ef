// Crash-safe writing for every file a run leaves (checkpoints, metrics, summary, config,
// timeline): after a crash, a power cut or a full disk, the path holds either the complete
// old content or the complete new one, never a mix.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace dpt::io {

// Writes the pieces, in order, to `path`.tmp, fsyncs it, renames it over `path` and
// fsyncs the directory. On any failure (disk full, file-size limit, permissions) the
// temporary file is removed, `path` is left as it was, and dpt::Error says which file,
// which system call and the system's reason ("No space left on device").
void write_file_atomic(const std::string& path, const std::vector<std::string_view>& pieces);

// Appends `line` and a newline to `path` (created if missing) by rewriting the whole file
// through write_file_atomic: after a crash it holds all of its lines with or without the
// new one, never half of it. For small files written rarely (metrics.jsonl, once an epoch).
void append_line(const std::string& path, const std::string& line);

// Removes `path` if it exists; Error (with the reason) if it exists and cannot be removed.
void remove_file(const std::string& path);

// Reads a whole regular file. Error naming the path and reason when it cannot.
std::string read_file(const std::string& path);
// What loaders take to get a file's bytes: read_file, or a reader that reads on one rank and
// hands the bytes to the others (io/run_control.cpp).
using FileReader = std::function<std::string(const std::string& path)>;

}  // namespace dpt::io
