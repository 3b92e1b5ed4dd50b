// SPDX-License-Identifier: GPL-2.0-only
// Where one instance of Sluice keeps its things, and who may own them: the
// pin directory (bpffs: program, maps, links), the lock directory beside it
// (the lock every command takes), and the run directory (the agent's socket,
// the cluster sync's status file).
#pragma once

#include <string>
#include <string_view>

namespace sluice {

/// $SLUICE_PIN_DIR if set, else SLUICE_PIN_DIR (/sys/fs/bpf/sluice).
std::string default_pin_dir();

/// The run directory of the instance pinned in `pin_dir`: $SLUICE_RUN_DIR if
/// set; else /run/sluice for the default pin directory, /run/sluice-NAME for
/// /sys/fs/bpf/NAME, and /run/sluice-NAME.HASH for a pin directory NAME
/// elsewhere (HASH: of its whole path). bpffs names take no dots, so no two
/// pin directories share a run directory.
std::string run_dir_for(const std::string &pin_dir);

/// run_dir_for(default_pin_dir()).
std::string default_run_dir();

/// The directory whose flock serialises the commands of the instance pinned
/// in `pin_dir`: PIN_DIR-lock, beside it, so that no operation renames it
/// (an upgrade swaps the pin directory). Only `detach --all` removes it, and
/// a command that waited on a removed one locks the new one.
std::string lock_dir_for(const std::string &pin_dir);

/// Throws one line naming `dir` (`what`: "pin directory", ...) and the fix
/// unless `dir`, if it exists, is a directory owned by root (or by this
/// process's user) and writable by no one else, under parents that no one
/// else can rename it out of: each owned by root or this user, and writable
/// by others only if sticky (as /tmp, or a bpffs mounted 1777). Nothing if
/// `dir` does not exist.
void check_private_dir(const std::string &dir, const std::string &what);

/// Removes the files in `dir` whose names start with `prefix` and end with
/// `suffix`; nothing if `dir` is missing.
void remove_files_named(const std::string &dir, std::string_view prefix, std::string_view suffix);

/// Creates `dir` (one level) mode 0700 if missing, then check_private_dir.
void make_private_dir(const std::string &dir, const std::string &what);

} // namespace sluice
