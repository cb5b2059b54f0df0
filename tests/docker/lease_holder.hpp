// Starts the lease holder (tests/docker/lease_holder.cpp, at SBX_LEASE_HOLDER) on a DSN and
// reads the id of the sandbox it made: for the owner-lease tests of docker:// and e2b://,
// which then SIGKILL it.
#pragma once

#include <gtest/gtest.h>
#include <spawn.h>
#include <unistd.h>

#include <string>

#ifdef SBX_LEASE_HOLDER
namespace sandboxio::testing {

struct LeaseHolder {
  pid_t pid = 0;
  std::string sandbox_id{};  // empty when the holder printed none
};

/// `outlive`: the holder creates its sandbox with outlive_owner.
inline LeaseHolder start_lease_holder(const std::string& dsn, bool outlive = false) {
  LeaseHolder h;
  int out[2];
  EXPECT_EQ(::pipe(out), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_addclose(&actions, out[0]);
  std::string holder = SBX_LEASE_HOLDER, target = dsn, mode = outlive ? "outlive" : "owned";
  char* args[] = {holder.data(), target.data(), mode.data(), nullptr};
  EXPECT_EQ(posix_spawn(&h.pid, holder.c_str(), &actions, nullptr, args, environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  char c = 0;
  while (::read(out[0], &c, 1) == 1 && c != '\n')
    h.sandbox_id.push_back(c);
  ::close(out[0]);
  EXPECT_FALSE(h.sandbox_id.empty()) << "the holder did not print a sandbox id";
  return h;
}

}  // namespace sandboxio::testing
#endif  // SBX_LEASE_HOLDER
