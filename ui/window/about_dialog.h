// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Help > About: Mantissa's version and its libraries' (version_report.h), the GPU, and which
// number formats run natively on it and which are emulated (format_support.h).

#include <QDialog>

#include "build_info.h"

class QTableWidget;

namespace mantissa {

class AboutDialog : public QDialog {
    Q_OBJECT

public:
    // `gpu`: the device to describe; current_gpu() for this machine, any other for tests.
    explicit AboutDialog(const GpuInfo& gpu, QWidget* parent = nullptr);

    QTableWidget* versionTable() const { return versions_; }
    QTableWidget* formatTable() const { return formats_; }

private:
    QTableWidget* versions_ = nullptr;
    QTableWidget* formats_ = nullptr;
};

// "NVIDIA H100 (sm_90)", "GPU (sm_90)" when NVML gives no name, "none (CPU)".
QString gpu_description(const GpuInfo& gpu);

} // namespace mantissa
