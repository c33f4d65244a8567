#pragma once
// Software prefetch of a weight stream for the matrix-vector tiles
// (matmul.hpp, quant_matmul.hpp). A tile reads R rows, contiguous in memory;
// while it consumes a stretch of its rows it prefetches the same stretch of
// the tiles after it, at the pace it consumes its own:
//   - of the next tile into L1 (_MM_HINT_T0), which that tile reads next;
//   - of the tile kL2TilesAhead on into L2 (_MM_HINT_T1), so that more lines
//     are on their way from memory than L1's miss buffers alone allow.
// Without the L2 stream a core keeps too few lines in flight to read at the
// memory's rate once several columns make the loop compute-heavy: the loads
// then wait on memory and the arithmetic waits on the loads, one after the
// other instead of overlapped. Prefetches never fault, so the tiles at a
// matrix's end may prefetch past it.
#include <cstddef>

#include "specdec/platform/x86.hpp"

namespace specdec::cpu::detail {

// How far ahead of the tile being read the L2 prefetch runs, in tiles.
inline constexpr std::size_t kL2TilesAhead = 4;

#if SPECDEC_X86
// Prefetches `lines` cache lines from `offset` bytes into the next tile
// (which starts at next_tile; a tile is tile_bytes long).
template <std::size_t Lines>
__attribute__((always_inline)) inline void prefetch_weight_lines(const char* next_tile, std::size_t tile_bytes,
                                                                  std::size_t offset) {
    const char* near = next_tile + offset;
    const char* far = near + (kL2TilesAhead - 1) * tile_bytes;
#pragma GCC unroll 16
    for (std::size_t line = 0; line < Lines; ++line) {
        _mm_prefetch(near + 64 * line, _MM_HINT_T0);
        _mm_prefetch(far + 64 * line, _MM_HINT_T1);
    }
}
#endif

}  // namespace specdec::cpu::detail
