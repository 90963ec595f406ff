// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The GEMM layers as the engine runs them now: formats, FP8 recipe, backend, and the last
// switch with its cause. Starts from the project's resolved recipe and follows the run's
// typed events (layer_backends, resumed_from_checkpoint, precision_changed), so a watcher's
// automatic switch to BF16 shows in the precision table and the heatmap like the user's own
// edit. No Qt.

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "project_config.h"
#include "run_event.h"

namespace mantissa {

struct LiveLayer {
    LayerState state;
    int64_t switched_at = -1;              // step of the last precision change, -1 if none
    ChangeCause cause = ChangeCause::User; // of that change
    std::string watcher;                   // the watcher, when one made it
    // "step 17: watcher nonfinite" / "step 5: you"; "" when never switched.
    std::string last_switch() const;
};

class LiveLayers {
public:
    // The formats and recipes a project gives each GEMM layer, forward order; backends unknown.
    static std::vector<LayerState> from_project(const ProjectConfig& config);

    void reset(const std::vector<LayerState>& initial = {});
    // True when the event changed a layer.
    bool apply(const RunEvent& event);

    bool empty() const { return layers_.empty(); }
    const std::vector<LiveLayer>& layers() const { return layers_; }
    const LiveLayer* find(const std::string& name) const; // nullptr when unknown
    uint64_t revision() const { return revision_; }

private:
    LiveLayer& ensure(const std::string& name);

    std::vector<LiveLayer> layers_;
    std::unordered_map<std::string, size_t> index_;
    uint64_t revision_ = 0;
};

} // namespace mantissa
