// The flight recorder's driver side: the machine every driver makes, behind a recorder writing
// to a file when asked (CreateOptions::record or SBX_RECORD=DIR), and the machine a trace's
// header describes, made again for `sandboxio replay`.
//
//   auto machine = sandboxio::make_machine(dsn, options).value();   // recorded when asked
//   auto bytes = sandboxio::read_trace("/tmp/traces/2026...-docker-412-1.sbxtrace").value();
//   sandboxio::flight::TraceReader trace(bytes);
//   auto again = sandboxio::machine_for_replay(trace.header().value()).value();
//   auto summary = sandboxio::flight::replay(*again, trace).value();   // SBX_E1604 if not
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "sandboxio/create_options.hpp"
#include "sandboxio/dsn.hpp"
#include "sandboxio/flight.hpp"
#include "sandboxio/machine.hpp"
#include "sandboxio/result.hpp"

namespace sandboxio {

/// The default bound of one trace, in MiB (SBX_RECORD_MAX_MIB changes it).
inline constexpr std::uint64_t kDefaultRecordMaxMib = 256;

/// Makes the machine for `dsn` as every driver does (its registry entry, behind the admission
/// guard). When `options.record` or SBX_RECORD names a directory, the machine is wrapped in a
/// flight::Recorder writing a new trace file there: DIR/UTC-TIME-SCHEME-PID-N.sbxtrace, owner
/// read and write only, at most SBX_RECORD_MAX_MIB (256) MiB. A directory that cannot be made
/// or written fails here (missing parents are made, owner-only), with SBX_E1004 (the option) or
/// SBX_E1003 (the variable).
[[nodiscard]] Result<std::unique_ptr<Machine>> make_machine(const Dsn& dsn,
                                                            const CreateOptions& options);

/// Reads a whole trace file; SBX_E1603 when it cannot be read.
[[nodiscard]] Result<std::string> read_trace(const std::string& path);

/// The machine `header` describes, made as the recorded one was: its DSN, with what the
/// backend's configuration read from the recording process (environment, owner, session)
/// answered from the header. Makes no connection and reads no daemon.
[[nodiscard]] Result<std::unique_ptr<Machine>> machine_for_replay(const flight::Header& header);

}  // namespace sandboxio
