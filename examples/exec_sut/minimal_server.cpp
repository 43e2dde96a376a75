// Minimal C++ server of the lidarmt exec protocol, version 1 (docs/exec-sut.md).
//
// A trivial but real detector: the in-ROI points above a ground height are binned into a bird's-eye grid,
// 8-connected occupied cells form clusters, and every cluster of at least `min_points` points is reported as
// an obstacle whose class follows from its occupied area (pedestrian <= 1.5 m^2 < cyclist <= 3 m^2 < car
// <= 16 m^2 < unknown). It sends classes, scores and point indices only: lidarmt builds the boxes (MinBox).
//
//     c++ -O2 -std=c++17 -o minimal_server examples/exec_sut/minimal_server.cpp
//     lidarmt fuzz --bag bags/demo.bag --map hdmaps/demo --sut "exec:$PWD/minimal_server"
//         --sut-option cell=0.5 --sut-option ground=-1.5
//
// Options (from the handshake line): cell (metres, default 1), ground (metres in the sensor frame, default
// -1.4), min_points (default 3), half (half the grid's side in metres, default 60). Only stdout carries the
// protocol; diagnostics go to stderr (lidarmt puts its tail into crash and timeout findings).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

constexpr uint16_t kVersion = 1;
constexpr uint16_t kFlagPose = 1;
constexpr uint16_t kFlagRoiEmpty = 2;
constexpr uint32_t kFieldsXyzi = 0xF;

#pragma pack(push, 1)
struct Header {  // 48 bytes, little-endian (this example assumes a little-endian host)
  char magic[4];
  uint16_t version;
  uint16_t flags;
  uint32_t seq;
  uint32_t n_points;
  uint32_t n_roi;
  uint32_t fields;
  uint64_t body_bytes;
  double stamp;
  int64_t frame_index;
};
#pragma pack(pop)
static_assert(sizeof(Header) == 48, "the protocol header is 48 bytes");

bool read_exactly(void* dst, size_t n) {
  return n == 0 || std::fread(dst, 1, n, stdin) == n;
}

// The number after "key": in a flat JSON object, or `fallback` (enough for the handshake's options).
double option(const std::string& json, const std::string& key, double fallback) {
  const std::string pat = "\"" + key + "\"";
  size_t at = json.find(pat);
  if (at == std::string::npos) return fallback;
  at = json.find(':', at + pat.size());
  if (at == std::string::npos) return fallback;
  try {
    return std::stod(json.substr(at + 1));
  } catch (...) {
    return fallback;
  }
}

struct Params {
  double cell = 1.0, ground = -1.4, half = 60.0;
  size_t min_points = 3;
};

struct DisjointSet {
  std::vector<int> parent;
  int find(int a) {
    while (parent[a] != a) a = parent[a] = parent[parent[a]];
    return a;
  }
  void join(int a, int b) {
    a = find(a);
    b = find(b);
    if (a != b) parent[b < a ? a : b] = b < a ? b : a;
  }
};

std::string detect(const Header& h, const std::vector<float>& body, const uint32_t* roi, const Params& p) {
  const float* x = body.data();
  const float* y = x + h.n_points;
  const float* z = y + h.n_points;
  const long w = static_cast<long>(std::lround(2 * p.half / p.cell));
  // occupied cells (by in-ROI points above the ground), numbered in order of first appearance
  std::unordered_map<long, int> cell_id;
  std::vector<long> cells;
  std::vector<std::vector<uint32_t>> members;
  if (!(h.flags & kFlagRoiEmpty)) {
    for (uint32_t k = 0; k < h.n_roi; ++k) {
      const uint32_t i = roi[k];
      if (!(z[i] > p.ground) || !std::isfinite(x[i]) || !std::isfinite(y[i])) continue;
      const long c = static_cast<long>(std::floor((x[i] + p.half) / p.cell));
      const long r = static_cast<long>(std::floor((y[i] + p.half) / p.cell));
      if (c < 0 || c >= w || r < 0 || r >= w) continue;
      auto [it, fresh] = cell_id.emplace(r * w + c, static_cast<int>(cells.size()));
      if (fresh) {
        cells.push_back(r * w + c);
        members.emplace_back();
      }
      members[it->second].push_back(i);
    }
  }
  DisjointSet ds{std::vector<int>(cells.size())};
  for (size_t a = 0; a < cells.size(); ++a) ds.parent[a] = static_cast<int>(a);
  for (size_t a = 0; a < cells.size(); ++a) {
    const long r = cells[a] / w, c = cells[a] % w;
    for (long dr = -1; dr <= 1; ++dr)
      for (long dc = -1; dc <= 1; ++dc) {
        if ((dr || dc) && r + dr >= 0 && r + dr < w && c + dc >= 0 && c + dc < w) {
          auto it = cell_id.find((r + dr) * w + c + dc);
          if (it != cell_id.end()) ds.join(static_cast<int>(a), it->second);
        }
      }
  }
  // clusters in order of their first cell; points ascending within a cluster
  std::unordered_map<int, size_t> slot;
  std::vector<std::vector<uint32_t>> clusters;
  std::vector<size_t> n_cells;
  for (size_t a = 0; a < cells.size(); ++a) {
    auto [it, fresh] = slot.emplace(ds.find(static_cast<int>(a)), clusters.size());
    if (fresh) {
      clusters.emplace_back();
      n_cells.push_back(0);
    }
    auto& dst = clusters[it->second];
    dst.insert(dst.end(), members[a].begin(), members[a].end());
    ++n_cells[it->second];
  }
  std::string out = "{\"seq\": " + std::to_string(h.seq) + ", \"obstacles\": [";
  bool first = true;
  for (size_t k = 0; k < clusters.size(); ++k) {
    auto& pts = clusters[k];
    if (pts.size() < p.min_points) continue;
    std::sort(pts.begin(), pts.end());
    const double area = static_cast<double>(n_cells[k]) * p.cell * p.cell;
    const char* cls = area <= 1.5 ? "pedestrian" : area <= 3 ? "cyclist" : area <= 16 ? "car" : "unknown";
    out += first ? "" : ", ";
    first = false;
    out += "{\"class\": \"" + std::string(cls) + "\", \"score\": 1.0, \"point_indices\": [";
    for (size_t j = 0; j < pts.size(); ++j) out += (j ? "," : "") + std::to_string(pts[j]);
    out += "]}";
  }
  return out + "]}\n";
}

}  // namespace

int main() {
  std::string hello;
  if (!std::getline(std::cin, hello)) return 0;
  Params p;
  p.cell = option(hello, "cell", p.cell);
  p.ground = option(hello, "ground", p.ground);
  p.half = option(hello, "half", p.half);
  p.min_points = static_cast<size_t>(option(hello, "min_points", static_cast<double>(p.min_points)));
  if (!(p.cell > 0) || !(p.half > 0)) {
    std::printf("{\"lidarmt_exec\": 1, \"error\": \"cell and half must be positive\"}\n");
    return 1;
  }
  std::printf("{\"lidarmt_exec\": 1, \"name\": \"grid-cpp\"}\n");
  std::fflush(stdout);
  std::fprintf(stderr, "minimal_server: cell %g m, ground %g m, min_points %zu\n", p.cell, p.ground, p.min_points);
  Header h;
  std::vector<float> body;
  std::vector<uint32_t> roi;
  while (read_exactly(&h, sizeof h)) {
    if (std::memcmp(h.magic, "LMXF", 4) != 0 || h.version != kVersion || h.fields != kFieldsXyzi) {
      std::fprintf(stderr, "minimal_server: not a version-1 request\n");
      return 2;
    }
    const uint64_t want = 16ull * h.n_points + ((h.flags & kFlagPose) ? 128 : 0) + 4ull * h.n_roi;
    if (h.body_bytes != want) {
      std::fprintf(stderr, "minimal_server: body of %llu bytes, expected %llu\n",
                   static_cast<unsigned long long>(h.body_bytes), static_cast<unsigned long long>(want));
      return 2;
    }
    body.resize(4ull * h.n_points);
    double pose[16];
    roi.resize(h.n_roi);
    if (!read_exactly(body.data(), 16ull * h.n_points) ||
        ((h.flags & kFlagPose) && !read_exactly(pose, sizeof pose)) || !read_exactly(roi.data(), 4ull * h.n_roi)) {
      std::fprintf(stderr, "minimal_server: input ended inside a request\n");
      return 2;
    }
    if (std::any_of(roi.begin(), roi.end(), [&](uint32_t i) { return i >= h.n_points; })) {
      std::printf("{\"seq\": %u, \"error\": \"an ROI index is outside the frame\"}\n", h.seq);
      std::fflush(stdout);
      continue;
    }
    const std::string reply = detect(h, body, roi.data(), p);
    std::fwrite(reply.data(), 1, reply.size(), stdout);
    std::fflush(stdout);
  }
  return 0;
}
