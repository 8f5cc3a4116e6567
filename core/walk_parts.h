// The number formats the walks share (core/walk.cpp's forward walk, core/walk_backward.cpp's):
// tables and sentences, and JSON.
#pragma once

#include "core/walk.h"

#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

namespace attnlab {

// 4 significant digits, −∞ / +∞, "—" for NaN, never "-0".
std::string walk_number(double x);
// "[a, b, …]", the first 8 of a long vector then its length; "—" when empty.
std::string walk_vector(const std::vector<double>& v);
// %.9g (every float round-trips), non-finite as null.
nlohmann::ordered_json walk_json_number(double x);
nlohmann::ordered_json walk_json_vector(const std::vector<double>& v);
// source_line (core/problem.h) and a line break, as run's texts begin; "" without a source.
std::string walk_source_line(const WalkHeader& w, Lang lang);
// The row's description as both walks' JSON starts: query, head, tile, temperature, mask, the
// modifications (when any), d_k, d_v, keys, the source (when any).
void walk_json_header(const WalkHeader& w, nlohmann::ordered_json& j);
// A tile's first fields: index, keys [j0, j1), skipped and, when skipped, why (causal, window,
// document).
void walk_json_tile(int index, int j0, int j1, WalkTile::Skip skip, nlohmann::ordered_json& o);

// The texts tell a run of skipped tiles with one reason as one entry (a narrow window over a long
// row had printed a note per tile, all alike, around the few tiles read): the end of the run that
// starts at tiles[i], i + 1 where tiles[i] is read or its neighbour differs.
template <class Tile>
std::size_t skipped_run_end(const std::vector<Tile>& tiles, std::size_t i) {
  std::size_t end = i + 1;
  if (!tiles[i].skipped) return end;
  while (end < tiles.size() && tiles[end].skipped && tiles[end].skip == tiles[i].skip) ++end;
  return end;
}
// The texts' next entry from tiles[i], i moved past it: the tile that stands for the run (the
// first's index, keys from the first's j0 to the last's j1, the last's state: a skipped tile
// changes nothing) and how many tiles it stands for.
template <class Tile>
std::pair<Tile, int> walk_entry(const std::vector<Tile>& tiles, std::size_t& i) {
  const std::size_t end = skipped_run_end(tiles, i);
  Tile t = tiles[end - 1];
  t.index = tiles[i].index;
  t.j0 = tiles[i].j0;
  const int run = static_cast<int>(end - i);
  i = end;
  return {std::move(t), run};
}
// The heading of tiles [first, last]: "Tile 3 · keys 192–255" or "Tiles 4–1023 · keys 256–65535
// (1020 tiles)", in the language's words; keys [j0, j1).
std::string walk_tiles_heading(int first, int last, int j0, int j1, Lang lang);
// The subject of a skipped run's sentence: "this tile" / "these 1020 tiles" and its verb's "is" /
// "are"; "这一块" / "这 1020 块".
std::string walk_tiles_subject(int tiles, Lang lang);

}  // namespace attnlab
