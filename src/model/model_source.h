// Where a --model argument points: an existing model directory, or a preset name that is
// materialised once (random init, seeded) into the user's cache and reused afterwards.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string_view>

#include "src/core/status.h"

namespace astrai {

// The directory presets are cached in: $ASTRAI_CACHE_DIR/presets, else
// $XDG_CACHE_HOME/astrai/presets, else ~/.cache/astrai/presets.
std::filesystem::path preset_cache_dir();

// An existing directory -> itself; a preset name -> <preset_cache_dir()>/NAME-seedN, written on
// first use (into a temp dir renamed when complete, so a crash never leaves half a model and
// concurrent first uses are safe); anything else -> "--model 'x': no such directory and not a
// preset (tiny, llama-1b, qwen3-0.6b, qwen3-8b)".
Result<std::filesystem::path> resolve_model_dir(std::string_view model_or_preset, uint64_t seed = 0);

}  // namespace astrai
