// SPDX-License-Identifier: GPL-3.0-or-later
#include "tensorboard_export.h"

#include <array>
#include <chrono>
#include <cmath>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

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
    explicit EventWriter(const std::string& path) : out_(path, std::ios::binary | std::ios::trunc)
    {
        if (!out_) throw ExportWriteError("cannot write '" + path + "': " + std::strerror(errno));
        Proto e;
        e.double_field(1, now());
        e.bytes_field(3, "brain.Event:2");
        record(e.bytes());
    }
    void scalar(int64_t step, const std::string& tag, double value)
    {
        Proto v;
        v.bytes_field(1, tag);
        v.float_field(2, static_cast<float>(value));
        summary(step, v);
    }
    void histogram(int64_t step, const std::string& tag, const TensorStats& t)
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
        summary(step, v);
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
    static double now()
    {
        return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    }
    void summary(int64_t step, const Proto& value)
    {
        Proto s;
        s.bytes_field(1, value.bytes());
        Proto e;
        e.double_field(1, now());
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

std::string export_tensorboard(RunStore& store, int64_t run_id, const std::string& dir)
{
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::create_directories(dir, ec);
    const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
    // TensorBoard's own pattern, with the run: two exports in one second (two runs, or the same
    // run again) each get a file of their own, and nothing exported earlier is written over.
    const std::string stem = "events.out.tfevents." + std::to_string(seconds) + ".mantissa.run" + std::to_string(run_id);
    std::string path = (fs::path(dir) / stem).string();
    for (int n = 2; fs::exists(path, ec); ++n) path = (fs::path(dir) / (stem + "." + std::to_string(n))).string();
    EventWriter writer(path);
    for (const auto& row : store.scalars(run_id))
        if (std::isfinite(row.value)) writer.scalar(row.step, row.tag, row.value);
    for (const auto& [step, stats] : store.layer_stats(run_id))
        writer.histogram(step, "exponents/" + stats.layer + "/" + stats.role, stats);
    if (!writer.finish()) {
        // A cut event file would read as a run that stopped early: none is better.
        fs::remove(path, ec);
        throw ExportWriteError("cannot write '" + path + "' (disk full?)");
    }
    return path;
}

} // namespace mantissa
