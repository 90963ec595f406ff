// SPDX-License-Identifier: GPL-3.0-or-later
#include "tensorboard_export.h"
#include "folder_name.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <iterator>
#include <ctime>
#include <cstdio>

namespace mantissa {
namespace {

const std::array<uint32_t, 256>& crc_table()
{
    static const auto table = [] {
        std::array<uint32_t, 256> t{};
        for (uint32_t i = 0; i < 256; ++i) {
            uint32_t c = i;
            for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1; // reflected Castagnoli
            t[i] = c;
        }
        return t;
    }();
    return table;
}

// Minimal protobuf wire encoding: just what Event, Summary and HistogramProto need.
class Proto {
public:
    void varint(uint64_t v)
    {
        while (v >= 0x80) {
            bytes_ += static_cast<char>((v & 0x7F) | 0x80);
            v >>= 7;
        }
        bytes_ += static_cast<char>(v);
    }
    void key(int field, int wire) { varint(static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire)); }
    void int64_field(int field, int64_t v) { key(field, 0); varint(static_cast<uint64_t>(v)); }
    void double_field(int field, double v) { key(field, 1); raw(&v, 8); }
    void float_field(int field, float v) { key(field, 5); raw(&v, 4); }
    void bytes_field(int field, const std::string& v) { key(field, 2); varint(v.size()); bytes_ += v; }
    void packed_doubles(int field, const std::vector<double>& v)
    {
        key(field, 2);
        varint(v.size() * 8);
        for (double d : v) raw(&d, 8);
    }
    const std::string& bytes() const { return bytes_; }

private:
    void raw(const void* p, size_t n) { bytes_.append(static_cast<const char*>(p), n); } // x86-64/ARM: little-endian
    std::string bytes_;
};

class EventWriter {
public:
    // `file`: where it writes; `shown`: the name its errors give (the file it will become).
    EventWriter(const std::string& file, const std::string& shown, double start_wall_time)
        : out_(file, std::ios::binary | std::ios::trunc)
    {
        if (!out_) throw ExportWriteError("cannot write '" + shown + "': " + std::strerror(errno));
        Proto e;
        e.double_field(1, start_wall_time);
        e.bytes_field(3, "brain.Event:2");
        record(e.bytes());
    }
    // NaN and inf as they are: a diverged loss reads as such, not as a curve that stops.
    void scalar(int64_t step, double wall_time, const std::string& tag, double value)
    {
        Proto v;
        v.bytes_field(1, tag);
        v.float_field(2, static_cast<float>(value));
        summary(step, wall_time, v);
    }
    void histogram(int64_t step, double wall_time, const std::string& tag, const TensorStats& t)
    {
        // Buckets are powers of two of |x|: the bin of exponent e holds [2^e, 2^(e+1)).
        Proto h;
        double num = 0;
        std::vector<double> limits, counts;
        for (size_t i = 0; i < t.exponent_counts.size(); ++i) {
            limits.push_back(std::ldexp(1.0, t.first_exponent + static_cast<int>(i) + 1));
            counts.push_back(static_cast<double>(t.exponent_counts[i]));
            num += counts.back();
        }
        if (limits.empty()) return;
        h.double_field(1, std::ldexp(1.0, t.first_exponent));
        h.double_field(2, t.amax);
        h.double_field(3, num);
        h.packed_doubles(6, limits);
        h.packed_doubles(7, counts);
        Proto v;
        v.bytes_field(1, tag);
        v.bytes_field(5, h.bytes());
        summary(step, wall_time, v);
    }
    // Writes out what the stream still buffers: a small export fits in the buffer whole, so
    // a full disk shows only here.
    bool finish()
    {
        out_.flush();
        out_.close();
        return !out_.fail();
    }

private:
    void summary(int64_t step, double wall_time, const Proto& value)
    {
        Proto s;
        s.bytes_field(1, value.bytes());
        Proto e;
        e.double_field(1, wall_time);
        e.int64_field(2, step);
        e.bytes_field(5, s.bytes());
        record(e.bytes());
    }
    void record(const std::string& data)
    {
        const uint64_t length = data.size();
        const uint32_t length_crc = masked_crc32c(&length, 8);
        const uint32_t data_crc = masked_crc32c(data.data(), data.size());
        out_.write(reinterpret_cast<const char*>(&length), 8);
        out_.write(reinterpret_cast<const char*>(&length_crc), 4);
        out_.write(data.data(), static_cast<std::streamsize>(data.size()));
        out_.write(reinterpret_cast<const char*>(&data_crc), 4);
    }
    std::ofstream out_;
};

} // namespace

uint32_t crc32c(const void* data, size_t size)
{
    const auto& table = crc_table();
    uint32_t c = 0xFFFFFFFFu;
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < size; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t size)
{
    const uint32_t c = crc32c(data, size);
    return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

namespace {

double now_seconds()
{
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The store's "2026-12-04T03:12:00Z" (or with fractional seconds) in seconds since the epoch;
// nullopt for anything else.
std::optional<double> utc_seconds(const std::string& text)
{
    std::tm tm{};
    double seconds = 0;
    if (std::sscanf(text.c_str(), "%d-%d-%dT%d:%d:%lfZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                    &tm.tm_min, &seconds) != 6)
        return std::nullopt;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    tm.tm_sec = 0;
    return static_cast<double>(timegm(&tm)) + seconds;
}

// "run4-tiny__precision.preset=bf16_": a run's folder, named so that TensorBoard's run list reads.
std::string run_folder_name(int64_t run_id, const std::string& name)
{
    return folder_name("run" + std::to_string(run_id) + (name.empty() ? "" : "-") + name);
}

} // namespace

namespace {

// Seconds of training from the run's start to the end of each step that has a step time, by
// step: a resumed run's pause is not in them.
class TrainedSeconds {
public:
    explicit TrainedSeconds(const Series& step_times_ms)
    {
        double total = 0;
        for (const auto& [step, ms] : step_times_ms)
            if (std::isfinite(ms)) ends_.emplace_back(step, total += ms / 1000.0);
    }
    double at_end_of(int64_t step) const
    {
        const auto after = std::upper_bound(ends_.begin(), ends_.end(), std::make_pair(step, HUGE_VAL));
        return after == ends_.begin() ? 0.0 : std::prev(after)->second;
    }

private:
    std::vector<std::pair<int64_t, double>> ends_;
};

} // namespace

TensorBoardExport::TensorBoardExport(RunStore& store, int64_t run_id, const std::string& dir)
    : dir_(dir), run_id_(run_id)
{
    namespace fs = std::filesystem;
    // The step times (wall times) and the rows from one view of a store a run still writes to.
    const RunStore::ReadSnapshot snapshot(store);
    std::string name, created_at;
    if (const auto info = store.find_run(std::to_string(run_id))) {
        name = info->name;
        created_at = info->created_at;
    }
    // TensorBoard takes a folder for one run: runs exported into one --out each get their own,
    // side by side, instead of one series of both runs' steps.
    const fs::path folder = fs::path(dir) / run_folder_name(run_id, name);
    // Wall times of training, not of the export: the run's start plus the step times up to the
    // end of each step (TensorBoard's Relative and Wall axes).
    const double start = utc_seconds(created_at).value_or(now_seconds());
    const TrainedSeconds trained(store.series(run_id, "step_time_ms"));
    const auto wall_time = [&](int64_t step) { return start + trained.at_end_of(step); };
    // A new export of the run replaces its earlier file whole: written beside it under a name
    // TensorBoard does not read, then renamed over it.
    name_ = "events.out.tfevents." + std::to_string(static_cast<int64_t>(start)) + ".mantissa";
    folder_ = folder.string();
    path_ = (folder / name_).string();
    partial_ = (folder / ".mantissa-export.partial").string();
    std::error_code ec;
    if (!fs::exists(folder, ec)) {
        fs::path highest = folder;
        while (highest.has_parent_path() && highest.parent_path() != highest &&
               !fs::exists(highest.parent_path(), ec))
            highest = highest.parent_path();
        made_from_ = highest.string();
    }
    try {
        if (fs::create_directories(folder, ec); ec)
            throw ExportWriteError("cannot write '" + path_ + "': " + ec.message());
        EventWriter writer(partial_, path_, start);
        store.for_each_scalar(run_id, [&](const ScalarRow& row) {
            writer.scalar(row.step, wall_time(row.step), row.tag, row.value);
            ++events_;
        });
        store.for_each_layer_stats(run_id, /*with_histograms=*/true, [&](int64_t step, const TensorStats& stats) {
            const std::string tensor = stats.layer + "/" + stats.role;
            const double at = wall_time(step);
            writer.histogram(step, at, "exponents/" + tensor, stats);
            writer.scalar(step, at, "nonfinite/" + tensor, static_cast<double>(stats.nans + stats.infs));
            // -1: not measured (a 16-bit tensor whose cast no row saw).
            if (stats.underflow >= 0) writer.scalar(step, at, "underflow/" + tensor, stats.underflow);
            if (stats.overflow >= 0) writer.scalar(step, at, "overflow/" + tensor, stats.overflow);
            ++events_;
        });
        // A cut event file would read as a run that stopped early: none is better.
        if (!writer.finish()) throw ExportWriteError("cannot write '" + path_ + "' (disk full?)");
    } catch (...) {
        undo(); // no destructor runs for an object whose constructor threw
        throw;
    }
}

TensorBoardExport::~TensorBoardExport()
{
    if (!committed_) undo();
}

// A failed export leaves no folder it made either (an empty run folder would show in
// TensorBoard's run list as a run with nothing in it). fs::remove takes only empty ones.
void TensorBoardExport::undo() noexcept
{
    namespace fs = std::filesystem;
    std::error_code ec;
    if (!partial_.empty()) fs::remove(partial_, ec);
    if (made_from_.empty()) return;
    // Each folder it made, up to the highest (`--out a/x/y` of an empty run left a/x).
    for (fs::path p = folder_; !p.empty(); p = p.parent_path()) {
        fs::remove(p, ec);
        if (p == fs::path(made_from_) || p == p.parent_path()) break;
    }
}

std::string TensorBoardExport::commit()
{
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::rename(partial_, path_, ec);
    if (ec) throw ExportWriteError("cannot write '" + path_ + "': " + ec.message()); // the destructor undoes
    committed_ = true;
    const fs::path folder(folder_);
    // An earlier export of this run under another name (an older version's), or in the folder
    // of its earlier name (renamed since): TensorBoard would read both, every point twice.
    for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec))
        if (const std::string other = it->path().filename().string();
            other != name_ && other.find("tfevents") != std::string::npos && it->is_regular_file())
            fs::remove(it->path(), ec);
    // Only this run's file there, by its name (the run's start): run 1 of another store exported
    // into the same --out is another run, and its export stays.
    const std::string mine = "run" + std::to_string(run_id_);
    for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string other = it->path().filename().string();
        if (it->path() == folder || !it->is_directory() || (other != mine && other.rfind(mine + "-", 0) != 0)) continue;
        std::error_code removing; // only its event file: anything else there is not ours
        if (fs::is_regular_file(it->path() / name_, removing)) fs::remove(it->path() / name_, removing);
        fs::remove(it->path(), removing); // removed only when that left it empty
    }
    return path_;
}

std::string export_tensorboard(RunStore& store, int64_t run_id, const std::string& dir)
{
    return TensorBoardExport(store, run_id, dir).commit();
}

} // namespace mantissa
