// Shell quoting for backends that run a shell string rather than an argument list (E2B's envd
// runs `/bin/bash -l -c STRING`): an argument list quoted so that the shell sees exactly those
// arguments, whatever bytes they hold.
//
//   sandboxio::shell_join({"printf", "%s\n", "it's"});   // printf '%s\n' 'it'\''s'
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace sandboxio {

/// One argument, single-quoted unless it is made only of characters no shell treats specially.
[[nodiscard]] std::string shell_quote(std::string_view arg);
/// The arguments quoted and joined with spaces.
[[nodiscard]] std::string shell_join(const std::vector<std::string>& argv);

/// The environment variable that marks every process of one command (docker://, e2b://): a
/// random token per command, inherited by its whole process tree, setsid children included.
inline constexpr std::string_view kExecTokenVar = "SBX_EXEC_TOKEN";

/// Kills every process whose environment carries the token given as $1 (run as
/// `sh -c SCRIPT sh TOKEN`). Runs as the sandbox's user, which may kill its own processes
/// without CAP_KILL. Exits 0 whatever it found.
inline constexpr std::string_view kKillByTokenScript =
    R"(for p in /proc/[0-9]*; do )"
    R"(if grep -qz "^SBX_EXEC_TOKEN=$1\$" "$p/environ" 2>/dev/null; )"
    R"(then kill -KILL "${p#/proc/}" 2>/dev/null; fi; done; exit 0)";

}  // namespace sandboxio
