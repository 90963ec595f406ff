// SPDX-License-Identifier: GPL-3.0-or-later
// Checkpoints: everything a bit-exact resume needs, written atomically, and their rotation.
#include "trainer_impl.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

namespace mantissa {

std::vector<std::string> list_checkpoints(const std::string& dir)
{
    namespace fs = std::filesystem;
    std::vector<std::string> files;
    std::error_code ec;
    if (dir.empty() || !fs::is_directory(dir, ec)) return files;
    for (const auto& entry : fs::directory_iterator(dir))
        if (entry.path().filename().string().rfind("step-", 0) == 0 && entry.path().extension() == ".pt")
            files.push_back(entry.path().string());
    std::sort(files.begin(), files.end()); // zero-padded step numbers sort by name
    return files;
}

void Trainer::Impl::save_checkpoint(const std::string& path)
{
    namespace fs = std::filesystem;
    torch::serialize::OutputArchive archive;
    archive.write("format_version", torch::tensor(int64_t(1)));
    archive.write("step", torch::tensor(step));
    for (const auto& item : model->named_parameters()) archive.write("model/" + item.key(), item.value());
    optimizer->save(archive);
    const auto sc = scaler.state();
    archive.write("scaler", torch::tensor({sc.scale, static_cast<double>(sc.growth_tracker),
                                           static_cast<double>(sc.overflows_left)},
                                          torch::kFloat64));
    for (const auto& g : model->gemm_layers()) g->save(archive);
    archive.write("rng/global", at::detail::getDefaultCPUGenerator().get_state());
    archive.write("rng/train_batches", train_batches->generator().get_state());
    const fs::path target(path);
    if (target.has_parent_path()) fs::create_directories(target.parent_path());
    const fs::path temporary = target.string() + ".tmp";
    archive.save_to(temporary.string());
    fs::rename(temporary, target); // atomic on POSIX: a crash leaves the old file or the new one
}

void Trainer::Impl::load_checkpoint(const std::string& path)
{
    torch::serialize::InputArchive archive;
    // A fresh tensor per key: reading into a used one would try to resize the archive's storage.
    auto get = [&](const std::string& key) {
        torch::Tensor t;
        archive.read(key, t);
        return t;
    };
    try {
        archive.load_from(path);
        if (get("format_version").item<int64_t>() != 1)
            throw ConfigError("checkpoint '" + path + "' has an unknown format version");
        torch::NoGradGuard no_grad;
        for (auto& item : model->named_parameters()) {
            const auto t = get("model/" + item.key());
            if (!t.sizes().equals(item.value().sizes()))
                throw ConfigError("checkpoint '" + path + "' does not fit this model (" + item.key() + ")");
            item.value().copy_(t);
        }
        optimizer->load(archive);
        const auto sc = get("scaler");
        scaler.restore({sc[0].item<double>(), static_cast<int64_t>(sc[1].item<double>()),
                        static_cast<int64_t>(sc[2].item<double>())});
        for (const auto& g : model->gemm_layers()) g->load(archive);
        at::Generator global = at::detail::getDefaultCPUGenerator(); // a handle to the shared generator
        global.set_state(get("rng/global"));
        train_batches->generator().set_state(get("rng/train_batches"));
        step = get("step").item<int64_t>();
        resumed_from = path;
    } catch (const ConfigError&) {
        throw;
    } catch (const std::exception& e) {
        const std::string what = e.what();
        throw ConfigError("checkpoint '" + path + "' cannot be read: " + what.substr(0, what.find('\n')));
    }
}

std::string Trainer::Impl::write_periodic_checkpoint(TelemetrySink& sink)
{
    namespace fs = std::filesystem;
    const auto& dir = config.training.checkpoint_dir;
    if (dir.empty()) return {};
    char name[32];
    std::snprintf(name, sizeof name, "step-%08lld.pt", static_cast<long long>(step));
    const std::string path = (fs::path(dir) / name).string();
    save_checkpoint(path);
    auto existing = list_checkpoints(dir);
    for (size_t i = 0; i + static_cast<size_t>(config.training.checkpoint_keep) < existing.size(); ++i)
        fs::remove(existing[i]);
    RunEvent e;
    e.step = step;
    e.kind = EventKind::Checkpoint;
    e.path = path;
    sink.on_event(e);
    return path;
}

} // namespace mantissa
