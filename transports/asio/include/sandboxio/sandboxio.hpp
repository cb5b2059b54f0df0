// The whole library in one include: the sync API (sandboxio::sync), the async API on Asio
// (sandboxio::async), the value types and errors, the registry and settings, audit sinks, the
// routing file, and the first-party backends' own headers (typed extensions, the fake:// world).
//
//   #include <sandboxio/sandboxio.hpp>
//   auto sb = sandboxio::sync::Sandbox::create("docker://python:3.12-slim");
//   std::cout << sb.run({"python3", "-c", "print(6 * 7)"}).stdout_bytes;
//
// Headers under sandboxio/codec/ (HTTP, JSON, tar, ...) and sandboxio/backend/ (the machine
// core for writing a backend) are not included: they are for backend authors, not the API.
#pragma once

#include "sandboxio/async.hpp"
#include "sandboxio/config.hpp"
#include "sandboxio/docker.hpp"
#include "sandboxio/e2b.hpp"
#include "sandboxio/fake.hpp"
#include "sandboxio/routing.hpp"
#include "sandboxio/sinks.hpp"
#include "sandboxio/sync.hpp"
#include "sandboxio/telemetry.hpp"
