// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Which remote commands a live run would act on. A command accepted is recorded as steering
// (a remote_control event), so one that the trainer would apply as nothing (a second pause,
// a resume of a running loop, a pause or checkpoint of a stopping run) is refused instead.
// Not thread-safe: the server holds one lock across refusal(), the queueing and queued(), and
// the trainer's thread takes it for applied().

#include <string>

namespace mantissa {

class RemoteControlGate {
public:
    // Why `command` would change nothing ("is paused already"), or "" when it may be queued.
    std::string refusal(const std::string& command) const
    {
        // A stopping run drops a pause or a checkpoint (it writes its final one anyway).
        if (stop_asked_ && command != "layer_formats") return "is stopping";
        if (command == "pause" && pause_asked_) return "is paused already";
        if (command == "resume" && !pause_asked_) return "is not paused";
        return {};
    }
    // Why the trainer's queue took no command: it is closed. After a stop that is the stop
    // (whose final checkpoint is being written), not a last step that began.
    std::string closed_reason() const
    {
        return stop_asked_ ? "is stopping" : "is finishing (its last step has begun)";
    }
    // The trainer's queue took `command`.
    void queued(const std::string& command)
    {
        if (command == "stop") stopping();
        if (command != "pause" && command != "resume") return;
        pause_asked_ = command == "pause";
        ++pending_;
    }
    // A stop asked for elsewhere (Ctrl-C or SIGTERM at the terminal).
    void stopping() { stop_asked_ = true; }
    // The engine paused or resumed: one of ours (the state already says what the queue will
    // leave), or a watcher's pause. Taken from every event, the state trailed the queue: with
    // [pause, resume] queued, the pause's event said "paused", and a third client's resume was
    // accepted, recorded, and applied to a running loop as nothing.
    void applied(bool paused)
    {
        if (pending_ > 0) --pending_;
        else pause_asked_ = paused;
    }

private:
    bool stop_asked_ = false;
    bool pause_asked_ = false; // paused once every command queued so far is applied
    int pending_ = 0;          // pauses and resumes queued whose events have not come
};

} // namespace mantissa
