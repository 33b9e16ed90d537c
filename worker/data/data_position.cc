#include "worker/data/data_position.h"

#include <algorithm>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace flame::worker {
namespace {

using nlohmann::json;

constexpr int kFormat = 2;

json CursorsToJson(const std::vector<SourceCursor>& cursors) {
  json list = json::array();
  for (const SourceCursor& c : cursors) list.push_back({c.epoch, c.doc, c.file, c.offset});
  return list;
}

std::vector<SourceCursor> CursorsFromJson(const json& list) {
  std::vector<SourceCursor> cursors;
  for (const json& item : list) {
    const auto v = item.get<std::vector<int64_t>>();
    if (v.size() != 4) throw std::invalid_argument("a source cursor has 4 numbers");
    cursors.push_back({v[0], v[1], v[2], v[3]});
  }
  return cursors;
}

DataPosition DecodeCurrent(const json& j) {
  DataPosition p;
  p.rank = j.at("rank").get<int64_t>();
  p.world_size = j.at("world_size").get<int64_t>();
  p.pending = j.at("pending").get<std::vector<int32_t>>();
  for (const json& run : j.at("pending_sources")) {
    const auto v = run.get<std::vector<int64_t>>();
    if (v.size() != 2) throw std::invalid_argument("a pending source run has 2 numbers");
    p.pending_runs.push_back({v[0], v[1]});
  }
  p.pending_breaks = j.at("pending_breaks").get<std::vector<int64_t>>();
  for (const json& s : j.at("streams")) {
    DocumentStream stream;
    stream.next = s.at("next").get<int64_t>();
    stream.end = s.at("end").get<int64_t>();
    stream.stride = s.at("stride").get<int64_t>();
    stream.phase = s.at("phase").get<int64_t>();
    stream.cursors = CursorsFromJson(s.at("cursors"));
    p.streams.push_back(std::move(stream));
  }
  p.source_tokens = j.at("source_tokens").get<std::vector<int64_t>>();
  p.mixture = j.at("mixture").get<std::string>();
  return p;
}

// The first format: one source, rank r read document i of each epoch when i % W == r.
DataPosition DecodeLegacy(const json& j) {
  DataPosition p;
  p.legacy = true;
  p.rank = j.at("rank").get<int64_t>();
  p.world_size = j.at("world_size").get<int64_t>();
  p.pending = j.at("pending").get<std::vector<int32_t>>();
  if (!p.pending.empty()) p.pending_runs.push_back({0, static_cast<int64_t>(p.pending.size())});
  DocumentStream stream;
  stream.next = j.at("doc_index").get<int64_t>();
  stream.stride = p.world_size;
  stream.phase = p.world_size > 0 ? p.rank % p.world_size : 0;
  stream.cursors.push_back({j.at("epoch").get<int64_t>(), stream.next,
                            j.at("file_index").get<int64_t>(), j.at("byte_offset").get<int64_t>()});
  p.streams.push_back(std::move(stream));
  p.source_tokens = {0};
  return p;
}

// First index >= from that a stream of (stride, phase) takes.
int64_t FirstTaken(int64_t from, int64_t stride, int64_t phase) {
  return from + ((phase - from % stride) % stride + stride) % stride;
}

void AppendPiece(const DataPosition& from, DataPosition* to) {
  if (from.pending.empty()) return;
  const auto base = static_cast<int64_t>(to->pending.size());
  // A piece begins mid-document: after another piece that start is a segment boundary.
  if (base > 0) to->pending_breaks.push_back(base);
  for (int64_t b : from.pending_breaks) to->pending_breaks.push_back(base + b);
  to->pending.insert(to->pending.end(), from.pending.begin(), from.pending.end());
  to->pending_runs.insert(to->pending_runs.end(), from.pending_runs.begin(),
                          from.pending_runs.end());
}

}  // namespace

bool DocumentStream::HasDocumentsLeft() const {
  if (!bounded()) return true;
  return FirstTaken(next, stride, phase) < end;
}

DataPosition InitialDataPosition(int64_t rank, int64_t world_size, int64_t source_count) {
  DataPosition p;
  p.rank = rank;
  p.world_size = world_size;
  DocumentStream stream;
  stream.stride = world_size;
  stream.phase = rank;
  stream.cursors.assign(static_cast<size_t>(source_count), SourceCursor{});
  p.streams.push_back(std::move(stream));
  p.source_tokens.assign(static_cast<size_t>(source_count), 0);
  return p;
}

std::string EncodeDataPosition(const DataPosition& p) {
  json runs = json::array();
  for (const SourceRun& run : p.pending_runs) runs.push_back({run.source, run.tokens});
  json streams = json::array();
  for (const DocumentStream& s : p.streams) {
    streams.push_back({{"next", s.next},
                       {"end", s.end},
                       {"stride", s.stride},
                       {"phase", s.phase},
                       {"cursors", CursorsToJson(s.cursors)}});
  }
  const json j = {{"format", kFormat},          {"rank", p.rank},
                  {"world_size", p.world_size}, {"pending", p.pending},
                  {"pending_sources", runs},    {"pending_breaks", p.pending_breaks},
                  {"streams", streams},         {"source_tokens", p.source_tokens},
                  {"mixture", p.mixture}};
  return j.dump();
}

absl::StatusOr<DataPosition> DecodeDataPosition(const std::string& text) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return absl::DataLossError("data position is not a JSON object");
  try {
    if (!j.contains("format")) return DecodeLegacy(j);
    const int format = j.at("format").get<int>();
    if (format != kFormat) {
      return absl::FailedPreconditionError(absl::StrCat(
          "data position has format ", format, "; this worker reads formats 1 and ", kFormat));
    }
    return DecodeCurrent(j);
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat("data position is incomplete or mistyped: ", e.what()));
  }
}

absl::Status ValidateDataPositions(const std::vector<DataPosition>& positions,
                                   int64_t source_count) {
  if (positions.empty()) return absl::DataLossError("the checkpoint has no data positions");
  const auto world = static_cast<int64_t>(positions.size());
  std::set<int64_t> phases;
  for (int64_t r = 0; r < world; ++r) {
    const DataPosition& p = positions[static_cast<size_t>(r)];
    const std::string where = absl::StrCat("data position ", r, ": ");
    if (p.rank != r || p.world_size != world) {
      return absl::DataLossError(absl::StrCat(where, "says rank ", p.rank, " of ", p.world_size,
                                              ", expected rank ", r, " of ", world));
    }
    if (p.streams.empty() || p.streams.back().bounded()) {
      return absl::DataLossError(absl::StrCat(where, "has no unbounded stream"));
    }
    for (const DocumentStream& s : p.streams) {
      if (static_cast<int64_t>(s.cursors.size()) != source_count) {
        return absl::FailedPreconditionError(absl::StrCat(where, "was saved with ",
                                                          s.cursors.size(),
                                                          " data sources; "
                                                          "training.dataset now lists ",
                                                          source_count));
      }
      if (s.stride <= 0 || s.phase < 0 || s.phase >= s.stride || s.next < 0) {
        return absl::DataLossError(absl::StrCat(where, "has a malformed stream"));
      }
    }
    if (p.streams.back().stride != world) {
      return absl::DataLossError(absl::StrCat(where, "has a stream of stride ",
                                              p.streams.back().stride, " in a run of ", world));
    }
    phases.insert(p.streams.back().phase);
    int64_t run_total = 0;
    for (const SourceRun& run : p.pending_runs) {
      if (run.source < 0 || run.source >= source_count || run.tokens < 0) {
        return absl::DataLossError(absl::StrCat(where, "has a malformed pending source run"));
      }
      run_total += run.tokens;
    }
    if (run_total != static_cast<int64_t>(p.pending.size()) ||
        static_cast<int64_t>(p.source_tokens.size()) != source_count) {
      return absl::DataLossError(absl::StrCat(where, "has inconsistent source accounting"));
    }
  }
  if (static_cast<int64_t>(phases.size()) != world) {
    return absl::DataLossError("data positions: two ranks read the same documents");
  }
  return absl::OkStatus();
}

bool UpgradeLegacyDataPositions(std::vector<DataPosition>* positions) {
  if (positions->empty()) return true;
  const DataPosition* earliest = &positions->front();
  bool same_epoch = true;
  for (const DataPosition& p : *positions) {
    const SourceCursor& c = p.streams.front().cursors.front();
    const SourceCursor& e = earliest->streams.front().cursors.front();
    same_epoch = same_epoch && c.epoch == e.epoch;
    if (std::tie(c.epoch, c.doc) < std::tie(e.epoch, e.doc)) earliest = &p;
  }
  for (DataPosition& p : *positions) p.legacy = false;
  if (same_epoch) return true;
  const DocumentStream start = earliest->streams.front();
  for (DataPosition& p : *positions) {
    p.streams = {start};
    p.streams.front().phase = p.rank;
    p.pending.clear();
    p.pending_runs.clear();
    p.pending_breaks.clear();
  }
  return false;
}

absl::StatusOr<std::vector<DataPosition>> ReshardDataPositions(const std::vector<DataPosition>& old,
                                                               int64_t new_world_size) {
  if (new_world_size <= 0) return absl::InvalidArgumentError("world size must be positive");
  if (old.empty()) return absl::DataLossError("the checkpoint has no data positions");
  const size_t source_count = old.front().source_tokens.size();
  FLAME_RETURN_IF_ERROR(ValidateDataPositions(old, static_cast<int64_t>(source_count)));

  std::vector<DataPosition> fresh(static_cast<size_t>(new_world_size));
  for (int64_t r = 0; r < new_world_size; ++r) {
    fresh[static_cast<size_t>(r)].rank = r;
    fresh[static_cast<size_t>(r)].world_size = new_world_size;
    fresh[static_cast<size_t>(r)].source_tokens.assign(source_count, 0);
    fresh[static_cast<size_t>(r)].mixture = old.front().mixture;
  }
  // Leftovers go to new ranks in turn; pieces first, so that each new rank's pending ids are
  // its pieces in order and its bounded streams come after them.
  size_t item = 0;
  const auto next_owner = [&]() -> DataPosition& {
    return fresh[item++ % static_cast<size_t>(new_world_size)];
  };
  for (const DataPosition& p : old) {
    if (!p.pending.empty()) AppendPiece(p, &next_owner());
  }
  for (const DataPosition& p : old) {
    for (size_t s = 0; s + 1 < p.streams.size(); ++s) {
      if (p.streams[s].HasDocumentsLeft()) next_owner().streams.push_back(p.streams[s]);
    }
  }
  const DataPosition* furthest = &old.front();
  for (const DataPosition& p : old) {
    if (p.streams.back().next > furthest->streams.back().next) furthest = &p;
  }
  const int64_t frontier = furthest->streams.back().next;  // G: nothing at or past it was read
  for (const DataPosition& p : old) {
    DocumentStream rest = p.streams.back();
    rest.end = frontier;
    if (rest.HasDocumentsLeft()) next_owner().streams.push_back(std::move(rest));
  }
  for (int64_t r = 0; r < new_world_size; ++r) {
    DocumentStream open = furthest->streams.back();
    open.stride = new_world_size;
    open.phase = (frontier + r) % new_world_size;
    fresh[static_cast<size_t>(r)].streams.push_back(std::move(open));
  }
  for (const DataPosition& p : old) {
    for (size_t s = 0; s < source_count; ++s) fresh[0].source_tokens[s] += p.source_tokens[s];
  }
  return fresh;
}

}  // namespace flame::worker
