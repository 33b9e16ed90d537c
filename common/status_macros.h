// Status plumbing shared by every target (absl::Status in server, client and the worker's
// non-Torch code; see STYLE.md "Errors").
#pragma once

#include <cstdio>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define FLAME_STATUS_CONCAT_INNER_(a, b) a##b
#define FLAME_STATUS_CONCAT_(a, b) FLAME_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function when `expr` (an absl::Status) is not OK.
#define FLAME_RETURN_IF_ERROR(expr)                  \
  do {                                               \
    ::absl::Status flame_status_ = (expr);           \
    if (!flame_status_.ok()) return flame_status_;   \
  } while (false)

// `lhs = value of expr` when expr (an absl::StatusOr) holds one; returns its status otherwise.
#define FLAME_ASSIGN_OR_RETURN(lhs, expr) \
  FLAME_ASSIGN_OR_RETURN_IMPL_(FLAME_STATUS_CONCAT_(flame_statusor_, __LINE__), lhs, expr)
#define FLAME_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()

// A broken invariant: a bug in flame, never something the environment controls (Envoy's rule).
#define FLAME_CHECK(cond)                                                                \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "FLAME_CHECK failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                      \
    }                                                                                    \
  } while (false)
