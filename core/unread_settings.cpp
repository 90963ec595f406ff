// SPDX-License-Identifier: GPL-3.0-or-later
#include "unread_settings.h"

namespace mantissa {

std::string settings_as_read(const ProjectConfig& config)
{
    ProjectConfig read = config;
    read.precision = recipe_as_read(config.precision, config.model.n_layer);
    return to_json_text(read);
}

std::string why_recipe_setting_unread(const ProjectConfig& config, const std::string& key)
{
    const auto scalings = fp8_layer_scalings(config.precision, config.model.n_layer);
    if (scalings.empty())
        return "no GEMM computes in FP8 under precision.preset=" + config.precision.preset +
               (config.precision.layers.empty() ? "" : " and its precision.layers") +
               ", so no layer reads the FP8 recipe; set an FP8 preset (precision.preset=fp8-hybrid) "
               "or a precision.layers entry";
    std::string names;
    for (Fp8Scaling s : scalings) names += std::string(names.empty() ? "" : ", ") + fp8_scaling_name(s);
    return "the FP8 layers scale with " + names + ", which " + (scalings.size() == 1 ? "does" : "do") +
           " not read " + key;
}

} // namespace mantissa
