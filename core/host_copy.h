// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// One copy of a device buffer to the host: on CUDA asynchronous into pinned memory, with an
// event that says when it has landed, so that the stream goes on with what was queued after
// it; on the CPU the buffer already is host memory. The step's read and the telemetry frame
// both come back this way. Internal: includes LibTorch.

#include <optional>

#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/torch.h>

namespace mantissa {

struct HostCopy {
    torch::Tensor device_buffer; // kept alive until the copy has run
    torch::Tensor host;
    std::optional<c10::Event> landed;

    // The host values, once landed: waits for the stream up to the copy only, not for the
    // device (and not at all if it has landed).
    const torch::Tensor& wait() const
    {
        if (landed) landed->synchronize();
        return host;
    }
};

inline HostCopy start_copy(const torch::Tensor& buffer)
{
    HostCopy c;
    if (!buffer.is_cuda()) {
        c.host = buffer.contiguous();
        return c;
    }
    c.device_buffer = buffer;
    c.host = torch::empty(buffer.sizes(), buffer.options().device(torch::kCPU).pinned_memory(true));
    c.host.copy_(buffer, /*non_blocking=*/true);
    const c10::impl::VirtualGuardImpl guard(buffer.device().type());
    c.landed.emplace(buffer.device().type());
    c.landed->record(guard.getStream(buffer.device()));
    return c;
}

} // namespace mantissa
