// SPDX-License-Identifier: GPL-3.0-or-later
// Golden reference for training: the C++ engine must reproduce, step for step, the losses
// of the same model and recipe written in plain PyTorch (bench/reference_gpt.py, whose
// output is stored in data/golden_losses.txt).

#include <QtTest>

#include <QDir>
#include <QTemporaryDir>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "run_capture.h"
#include "arithmetic_record.h"
#include "build_info.h"
#include "trainer.h"

using namespace mantissa;

namespace {

struct Recorder : TelemetrySink {
    std::vector<StepMetrics> steps;
    std::vector<EvalMetrics> evals;
    std::vector<RunEvent> events;
    void on_step(const StepMetrics& m) override { steps.push_back(m); }
    void on_eval(const EvalMetrics& m) override { evals.push_back(m); }
    void on_event(const RunEvent& e) override { events.push_back(e); }
};

struct GoldenRow {
    int64_t step;
    double loss, grad_norm;
};

std::vector<GoldenRow> read_golden()
{
    std::ifstream in(MANTISSA_TEST_DATA_DIR "/golden_losses.txt");
    std::vector<GoldenRow> rows;
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty() || line[0] == '#') continue;
        std::istringstream fields(line);
        GoldenRow r{};
        fields >> r.step >> r.loss >> r.grad_norm;
        rows.push_back(r);
    }
    return rows;
}

ProjectConfig golden_project() { return load_project_file(MANTISSA_TEST_DATA_DIR "/golden_project.json"); }

} // namespace

class TestGolden : public QObject {
    Q_OBJECT
private slots:
    void matchesPlainPyTorch()
    {
        const auto golden = read_golden();
        QCOMPARE(golden.size(), size_t(30));
        Trainer trainer(golden_project());
        Recorder rec;
        const RunSummary summary = trainer.run(rec);
        QCOMPARE(summary.steps_done, int64_t(30));
        QCOMPARE(rec.steps.size(), golden.size());
        for (size_t i = 0; i < golden.size(); ++i) {
            QCOMPARE(rec.steps[i].step, golden[i].step);
            // Same kernels, same order: only reduction-order noise is allowed.
            if (std::abs(rec.steps[i].train_loss - golden[i].loss) > 2e-5)
                QFAIL(qPrintable(QString("step %1: loss %2, golden %3").arg(golden[i].step)
                                     .arg(rec.steps[i].train_loss, 0, 'g', 9).arg(golden[i].loss, 0, 'g', 9)));
            if (std::abs(rec.steps[i].grad_norm - golden[i].grad_norm) > 1e-4 * golden[i].grad_norm)
                QFAIL(qPrintable(QString("step %1: grad norm %2, golden %3").arg(golden[i].step)
                                     .arg(rec.steps[i].grad_norm, 0, 'g', 9).arg(golden[i].grad_norm, 0, 'g', 9)));
        }
        // Learning must actually happen: the golden run falls from 3.73 to about 2.94.
        QVERIFY(rec.steps.back().train_loss < rec.steps.front().train_loss - 0.5);
    }

    void evaluatesOnSchedule()
    {
        Trainer trainer(golden_project());
        Recorder rec;
        trainer.run(rec);
        QCOMPARE(rec.evals.size(), size_t(4)); // steps 0, 10, 20, 30
        QCOMPARE(rec.evals[0].step, int64_t(0));
        QCOMPARE(rec.evals[3].step, int64_t(30));
        QVERIFY(std::abs(rec.evals[0].val_loss - 3.7401) < 1e-3); // from the PyTorch twin
        QVERIFY(std::abs(rec.evals[3].val_loss - 3.1850) > 0.1);  // it moved
        QVERIFY(std::abs(rec.evals[1].val_loss - 3.1850) < 1e-3);
        QVERIFY(std::abs(rec.evals[3].val_loss - 2.9470) < 1e-3);
    }

    // A run whose weights went NaN (absurd weight decay) still evaluates: the sample ends at
    // the first token it cannot draw, instead of LibTorch's multinomial throwing.
    void divergedRunStillEvaluates()
    {
        auto config = golden_project();
        config.training.steps = 4;
        config.eval.interval = 2;
        config.eval.sample_tokens = 8;
        config.optimizer.weight_decay = 1.8e19;
        Trainer trainer(config);
        Recorder rec;
        const RunSummary summary = trainer.run(rec);
        QCOMPARE(summary.steps_done, int64_t(4));
        QVERIFY(std::isnan(rec.evals.back().val_loss));
        QCOMPARE(trainer.sample("", 5, 1), std::string());
    }

    void isBitwiseDeterministic()
    {
        auto run_once = [] {
            auto config = golden_project();
            config.training.steps = 8;
            Trainer trainer(config);
            Recorder rec;
            trainer.run(rec);
            std::vector<double> losses;
            for (const auto& s : rec.steps) losses.push_back(s.train_loss);
            return losses;
        };
        const auto a = run_once();
        const auto b = run_once();
        QCOMPARE(a.size(), size_t(8));
        QVERIFY(a == b); // exact equality, not a tolerance
    }

    // N steps straight, and k + checkpoint + a fresh process-like Trainer + the rest, give
    // identical losses, loss scales, telemetry frames and final weights (bit for bit), with
    // FP8 scaling state, dynamic loss scaling, dropout's random numbers and gradient
    // accumulation in play so all their state must travel. Telemetry runs every 2 steps and
    // the split lands on a step that is not on that schedule.
    // A resume right after a skipped step (non-finite gradients, dynamic loss scaling): the
    // straight run's weight casts must not outlive the step either, or it multiplies the next
    // step with a cast made under an older scale while the resumed run casts afresh, and
    // their FP8 histories part. The loss scale grows every step from a large start, so that
    // it overflows now and then; the split is the first skipped step after a taken one.
    void resumeAfterASkippedStepIsBitExact_data()
    {
        QTest::addColumn<QString>("backend");
        QTest::newRow("emulated") << "emulated";
        QTest::newRow("native") << "native";
    }
    void resumeAfterASkippedStepIsBitExact()
    {
        QFETCH(QString, backend);
        constexpr int64_t kSteps = 12;
        QTemporaryDir dir;
        auto config = golden_project();
        config.training.steps = kSteps;
        config.eval.interval = 0;
        config.model.n_embd = 64;
        config.telemetry.interval = 0;
        config.precision.preset = "fp8-hybrid";
        config.precision.fp8.saturate = false; // an overflowing cast is Inf, and the step is skipped
        config.precision.backend = backend == "native" ? GemmBackend::Native : GemmBackend::Emulated;
        config.precision.loss_scaling_mode = "dynamic";
        config.precision.loss_scaling.init_scale = 1024.0;
        config.precision.loss_scaling.growth_interval = 1;
        RunCapture straight;
        const QByteArray straight_weights = train_and_export(config, straight);
        QCOMPARE(straight.steps.size(), size_t(kSteps));
        int64_t split = 0;
        QString pattern;
        for (size_t i = 0; i < straight.steps.size(); ++i) {
            pattern += straight.steps[i].skipped ? "s" : ".";
            if (split == 0 && i > 0 && i + 1 < straight.steps.size() && straight.steps[i].skipped &&
                !straight.steps[i - 1].skipped)
                split = static_cast<int64_t>(i) + 1;
        }
        QVERIFY2(split > 0, qPrintable("no skipped step after a taken one: " + pattern));
        // A skipped step does not wedge the run: a later one is taken again.
        QVERIFY2(pattern.indexOf('.', split) > 0, qPrintable("every step after the first skip was skipped: " + pattern));

        auto first_part = config;
        first_part.training.steps = split;
        first_part.training.checkpoint_dir = dir.path().toStdString();
        RunCapture a;
        Trainer(first_part).run(a);
        Trainer resumed(config);
        resumed.load_checkpoint(dir.filePath(QString("step-%1.pt").arg(split, 8, 10, QChar('0'))).toStdString());
        RunCapture b;
        resumed.run(b);
        auto steps = a.steps;
        steps.insert(steps.end(), b.steps.begin(), b.steps.end());
        QCOMPARE(steps.size(), straight.steps.size());
        for (size_t i = 0; i < steps.size(); ++i) {
            const QString diff = step_difference(steps[i], straight.steps[i]);
            QVERIFY2(diff.isEmpty(), qPrintable(diff + " (skips " + pattern + ")"));
        }
        QVERIFY(exported_weights(resumed) == straight_weights);
    }

    void resumeIsBitExact_data()
    {
        QTest::addColumn<QString>("preset");
        QTest::addColumn<QString>("recipe");
        QTest::addColumn<int>("grad_accum");
        QTest::addColumn<QString>("backend");
        QTest::addColumn<QString>("fp8_layers"); // "", "mlp forward" or "attention": FP8 beyond the preset
        for (int accum : {1, 2}) {
            for (const char* preset : {"fp32", "bf16", "fp16", "fp8-hybrid", "fp8-hybrid-keep-ends"})
                QTest::addRow("%s/accum%d", preset, accum) << preset << "delayed" << accum << "emulated" << "";
            for (const char* recipe : {"current", "rowwise", "mxfp8"})
                QTest::addRow("fp8-hybrid/%s/accum%d", recipe, accum) << "fp8-hybrid" << recipe << accum << "emulated" << "";
            // The block recipes keep no generator: nvfp4's stochastic rounding draws from a seed
            // of the operand's own bits, so a resume draws what the straight run drew.
            for (const char* recipe : {"fp8-block", "nvfp4", "mxfp4"})
                QTest::addRow("fp8-e4m3/%s/accum%d", recipe, accum) << "fp8-e4m3" << recipe << accum << "emulated" << "";
            // The native executor's state (device-side FP8 histories, the FP8 weight cache) travels too.
            for (const char* preset : {"bf16", "fp16", "fp8-hybrid", "fp8-hybrid-keep-ends"})
                QTest::addRow("native/%s/accum%d", preset, accum) << preset << "delayed" << accum << "native" << "";
            QTest::addRow("native/fp8-hybrid/current/accum%d", accum) << "fp8-hybrid" << "current" << accum << "native" << "";
            for (const char* recipe : {"fp8-block", "nvfp4"})
                QTest::addRow("native/fp8-e4m3/%s/accum%d", recipe, accum) << "fp8-e4m3" << recipe << accum << "native" << "";
            // Layers of mixed GEMM formats, and FP8 attention (the emulator's products with
            // tensor-held scales) inside the native executor.
            QTest::addRow("native/bf16+fp8 mlp forward/accum%d", accum) << "bf16" << "delayed" << accum << "native"
                                                                        << "mlp forward";
            QTest::addRow("native/fp8-hybrid+fp8 attention/accum%d", accum) << "fp8-hybrid" << "delayed" << accum
                                                                            << "native" << "attention";
        }
    }
    void resumeIsBitExact()
    {
        QFETCH(QString, preset);
        QFETCH(QString, recipe);
        QFETCH(int, grad_accum);
        QFETCH(QString, backend);
        QFETCH(QString, fp8_layers);
        constexpr int64_t kSteps = 12, kSplit = 6;
        QTemporaryDir dir;
        auto config = golden_project();
        config.training.steps = kSteps;
        config.training.grad_accum = grad_accum;
        config.eval.interval = 0;
        config.model.dropout = 0.1;
        config.model.n_embd = 64; // wide enough that the FP32 GEMM paths would round differently
        config.telemetry.interval = 2;
        config.precision.preset = preset.toStdString();
        config.precision.fp8.scaling = *parse_fp8_scaling(recipe.toStdString());
        config.precision.backend = backend == "native" ? GemmBackend::Native : GemmBackend::Emulated;
        if (!fp8_layers.isEmpty()) {
            LayerOverride o;
            if (fp8_layers == "mlp forward") {
                o.match = "*.mlp.*";
                o.forward = NumberFormat::E4M3;
            } else {
                o.match = "*.attn.sdpa";
                o.forward = o.dgrad = o.wgrad = NumberFormat::E4M3;
            }
            config.precision.layers.push_back(o);
        }
        RunCapture straight;
        const QByteArray straight_weights = train_and_export(config, straight);
        QCOMPARE(straight.steps.size(), size_t(kSteps));
        QCOMPARE(straight.frame_steps(), (std::vector<int64_t>{1, 2, 4, 6, 8, 10, 12}));

        auto first_part = config;
        first_part.training.steps = kSplit;
        first_part.training.checkpoint_dir = dir.path().toStdString();
        RunCapture a;
        Trainer(first_part).run(a); // writes step-00000006.pt when it finishes
        const std::string checkpoint = dir.filePath("step-00000006.pt").toStdString();
        QVERIFY(QFile::exists(QString::fromStdString(checkpoint)));

        Trainer resumed(config);
        resumed.load_checkpoint(checkpoint);
        QCOMPARE(resumed.step(), kSplit);
        RunCapture b;
        resumed.run(b);
        const QByteArray resumed_weights = exported_weights(resumed);

        auto steps = a.steps;
        steps.insert(steps.end(), b.steps.begin(), b.steps.end());
        auto frames = a.frames;
        frames.insert(frames.end(), b.frames.begin(), b.frames.end());
        QCOMPARE(steps.size(), straight.steps.size());
        for (size_t i = 0; i < steps.size(); ++i) {
            const QString diff = step_difference(steps[i], straight.steps[i]);
            QVERIFY2(diff.isEmpty(), qPrintable(diff));
        }
        // The telemetry schedule depends on the step alone, not on where the process started.
        std::vector<int64_t> frame_steps;
        for (const auto& f : frames) frame_steps.push_back(f.step);
        QCOMPARE(frame_steps, straight.frame_steps());
        for (size_t i = 0; i < frames.size(); ++i) {
            const QString diff = frame_difference(frames[i], straight.frames[i]);
            QVERIFY2(diff.isEmpty(), qPrintable(diff));
        }
        QVERIFY(!straight_weights.isEmpty());
        QVERIFY2(resumed_weights == straight_weights, "final weights differ");
    }

    // ATen's CPU reductions split their work by thread, so a CPU run resumed on another
    // thread count is not bit-identical (the losses differ in their last bits here): the
    // resume event says so, and names the count that would be.
    void resumeOnAnotherThreadCountSaysSo()
    {
        QTemporaryDir dir;
        auto config = golden_project();
        config.training.steps = 2;
        config.eval.interval = 0;
        config.training.checkpoint_dir = dir.path().toStdString();
        QCOMPARE(config.training.threads, int64_t(1));
        Recorder first;
        Trainer(config).run(first);
        const std::string checkpoint = dir.filePath("step-00000002.pt").toStdString();
        for (const int64_t threads : {1, 2}) {
            auto more = config;
            more.training.steps = 3;
            more.training.threads = threads;
            Trainer resumed(more);
            resumed.load_checkpoint(checkpoint);
            Recorder rec;
            resumed.run(rec);
            const auto it = std::find_if(rec.events.begin(), rec.events.end(),
                                         [](const RunEvent& e) { return e.kind == EventKind::ResumedFromCheckpoint; });
            QVERIFY(it != rec.events.end());
            if (threads == 1) {
                QCOMPARE(QString::fromStdString(it->text), QString());
            } else {
                QVERIFY2(it->message().find("trained on 1 CPU threads, continuing on 2:") != std::string::npos,
                         it->message().c_str());
                QVERIFY2(it->message().find("set training.threads=1") != std::string::npos, it->message().c_str());
            }
        }
    }

    void badCheckpointsAreRefused()
    {
        QTemporaryDir dir;
        const QString junk = dir.filePath("junk.pt");
        QFile f(junk);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("not a checkpoint");
        f.close();
        Trainer trainer(golden_project());
        try {
            trainer.load_checkpoint(junk.toStdString());
            QFAIL("loaded junk");
        } catch (const ConfigError& e) {
            QVERIFY2(QString(e.what()).startsWith("checkpoint '" + junk + "' cannot be read"), e.what());
        }
        // A checkpoint of a different model shape names the first mismatching tensor.
        auto other = golden_project();
        other.model.n_embd = 16;
        const std::string path = dir.filePath("other.pt").toStdString();
        Trainer(other).save_checkpoint(path);
        try {
            trainer.load_checkpoint(path);
            QFAIL("loaded a checkpoint of another model");
        } catch (const ConfigError& e) {
            QVERIFY2(QString(e.what()).contains("does not fit this model (wte)"), e.what());
        }
    }

    // A real checkpoint, damaged: cut short, with flipped bits in the zip directory that
    // indexes its tensors, or one flipped bit inside a tensor (caught by the records' CRC-32,
    // which LibTorch does not check). Each load is refused with a message naming the file, the
    // file stays byte-for-byte as it was, and the trainer keeps its own weights and step.
    void damagedCheckpointsAreRefusedAndLeftAlone_data()
    {
        QTest::addColumn<QString>("damage");
        QTest::newRow("truncated to half") << "half";
        QTest::newRow("last byte cut") << "last byte";
        QTest::newRow("directory bit flip") << "directory";
        QTest::newRow("empty") << "empty";
        QTest::newRow("tensor bit flip") << "tensor"; // LibTorch alone would load it: the CRC check refuses it
    }
    void damagedCheckpointsAreRefusedAndLeftAlone()
    {
        QFETCH(QString, damage);
        QTemporaryDir dir;
        auto config = golden_project();
        config.training.steps = 3;
        config.eval.interval = 0;
        config.training.checkpoint_dir = dir.path().toStdString();
        {
            Recorder r;
            Trainer(config).run(r);
        }
        const QString path = dir.filePath("step-00000003.pt");
        QFile f(path);
        QVERIFY(f.open(QIODevice::ReadWrite));
        QByteArray bytes = f.readAll();
        QVERIFY(bytes.size() > 1000);
        if (damage == "half") bytes.truncate(bytes.size() / 2);
        if (damage == "last byte") bytes.chop(1);
        if (damage == "empty") bytes.clear();
        if (damage == "tensor") { // one bit in the middle of the largest tensor record (a weight)
            // Found through the zip's central directory: the local headers carry no sizes.
            const auto u16 = [&](qsizetype i) { return qsizetype(uchar(bytes[i])) | qsizetype(uchar(bytes[i + 1])) << 8; };
            const auto u32 = [&](qsizetype i) { return u16(i) | u16(i + 2) << 16; };
            qsizetype data_at = -1, data_size = 0;
            for (qsizetype at = bytes.indexOf(QByteArray("PK\x01\x02", 4)); at >= 0;
                 at = bytes.indexOf(QByteArray("PK\x01\x02", 4), at + 4)) {
                const qsizetype size = u32(at + 20), local = u32(at + 42);
                const QByteArray name = bytes.mid(at + 46, u16(at + 28));
                if (!name.contains("/data/") || size <= data_size) continue;
                data_size = size;
                data_at = local + 30 + u16(local + 26) + u16(local + 28);
            }
            QVERIFY(data_at > 0 && data_size >= 1000);
            bytes[data_at + data_size / 2] = static_cast<char>(bytes[data_at + data_size / 2] ^ 0x01);
        }
        if (damage == "directory") { // the central directory's first entry: its offset and size fields
            const qsizetype at = bytes.lastIndexOf(QByteArray("PK\x01\x02", 4), bytes.size() - 22);
            QVERIFY(at > 0);
            for (int i = 20; i < 28; ++i) bytes[at + i] = static_cast<char>(bytes[at + i] ^ 0x5a);
        }
        QVERIFY(f.resize(0));
        QCOMPARE(f.write(bytes), bytes.size());
        f.close();

        config.training.checkpoint_dir.clear();
        Trainer trainer(config);
        const QByteArray fresh_weights = exported_weights(trainer);
        try {
            trainer.load_checkpoint(path.toStdString());
            QFAIL("loaded a damaged checkpoint");
        } catch (const ConfigError& e) {
            QVERIFY2(QString(e.what()).startsWith("checkpoint '" + path + "' cannot be read"), e.what());
        }
        QFile again(path);
        QVERIFY(again.open(QIODevice::ReadOnly));
        QVERIFY(again.readAll() == bytes);
        QCOMPARE(trainer.step(), int64_t(0));
        QVERIFY2(exported_weights(trainer) == fresh_weights, "a refused checkpoint changed the weights");
    }

    // A future this run left behind (step 7: a stop cut short after its file was written and
    // before the store recorded it, so the resume took step 6) is not one of the `keep`: counted,
    // it pushed out a checkpoint of the run that went on, and only keep - 1 usable ones stayed
    // (read-only audit 'badinput'). Once the run is past it, it goes.
    void anAbandonedFutureIsNotKept()
    {
        QTemporaryDir dir;
        auto config = golden_project();
        config.training.steps = 7;
        config.eval.interval = 0;
        config.training.checkpoint_interval = 2;
        config.training.checkpoint_keep = 3;
        config.training.checkpoint_dir = dir.path().toStdString();
        Recorder first;
        Trainer(config).run(first);
        const auto files = [&] { return QDir(dir.path()).entryList({"*.pt"}, QDir::Files, QDir::Name); };
        QCOMPARE(files(), (QStringList{"step-00000004.pt", "step-00000006.pt", "step-00000007.pt"}));
        config.training.steps = 8;
        Trainer resumed(config);
        resumed.load_checkpoint(dir.filePath("step-00000006.pt").toStdString());
        Recorder second;
        resumed.run(second);
        QCOMPARE(files(), (QStringList{"step-00000004.pt", "step-00000006.pt", "step-00000008.pt"}));
    }

    void checkpointsRotate()
    {
        QTemporaryDir dir;
        auto config = golden_project();
        config.training.steps = 12;
        config.eval.interval = 0;
        config.training.checkpoint_interval = 2;
        config.training.checkpoint_keep = 2;
        config.training.checkpoint_dir = dir.path().toStdString();
        Recorder rec;
        Trainer(config).run(rec);
        const QStringList files = QDir(dir.path()).entryList({"*.pt"}, QDir::Files, QDir::Name);
        QCOMPARE(files, (QStringList{"step-00000010.pt", "step-00000012.pt"}));
        int checkpoint_events = 0;
        for (const auto& e : rec.events) checkpoint_events += e.tag() == "checkpoint";
        QCOMPARE(checkpoint_events, 6); // 2, 4, 6, 8, 10 and the final 12
        QCOMPARE(QDir(dir.path()).entryList({"*.tmp*"}, QDir::Files), QStringList{}); // no temporary file left

        // Checkpoint Now pressed while the periodic write of the step held the window: the same
        // state is not written again (a whole write more on the step's thread; read-only audit
        // 'ckpt-scale'), and the event says why.
        {
            Trainer twice(config);
            struct AskAgain : Recorder {
                Trainer* trainer = nullptr;
                void on_event(const RunEvent& e) override
                {
                    Recorder::on_event(e);
                    if (e.tag() == "checkpoint" && e.step == 4) trainer->request_checkpoint();
                }
            } asked;
            asked.trainer = &twice;
            twice.run(asked);
            int at4 = 0;
            QString skipped;
            for (const auto& e : asked.events) {
                at4 += e.tag() == "checkpoint" && e.step == 4;
                if (e.tag() == "checkpoint_skipped") skipped = QString::fromStdString(e.message());
            }
            QCOMPARE(at4, 1);
            QCOMPARE(skipped, QStringLiteral("step 4 was checkpointed already"));
        }

        // A run's rotation in a shared folder never removes a file it cannot read: it may be
        // another run's (damaged, or cut short).
        QTemporaryDir shared;
        QFile junk(shared.filePath("step-00000001.pt"));
        QVERIFY(junk.open(QIODevice::WriteOnly));
        junk.write("not a checkpoint");
        junk.close();
        config.training.checkpoint_dir = shared.path().toStdString();
        Trainer attached(config);
        attached.set_checkpoint_identity("0123456789abcdef0123456789abcdef", 7);
        Recorder again;
        attached.run(again);
        QCOMPARE(QDir(shared.path()).entryList({"*.pt"}, QDir::Files, QDir::Name),
                 (QStringList{"step-00000001.pt", "step-00000010.pt", "step-00000012.pt"}));

        // The store fills at step 5: checkpoints from step 6 on are written but not recorded.
        // A resume trusts only recorded ones, so step 4 stays, however many follow it; the
        // failed listener sees every write.
        QTemporaryDir full;
        config.training.checkpoint_dir = full.path().toStdString();
        Trainer unrecorded(config);
        std::vector<int64_t> told;
        unrecorded.set_checkpoint_listener([&](const Trainer::CheckpointWrite& w) {
            told.push_back(w.step);
            return w.step < 6;
        });
        Recorder filled;
        unrecorded.run(filled);
        QCOMPARE(told, (std::vector<int64_t>{2, 4, 6, 8, 10, 12}));
        QCOMPARE(QDir(full.path()).entryList({"*.pt"}, QDir::Files, QDir::Name),
                 (QStringList{"step-00000004.pt", "step-00000010.pt", "step-00000012.pt"}));
    }

    // A checkpoint of step 0 (asked for before the first step) resumes as any other: the
    // resume says so (the store drops what followed it by that event), and step 0's
    // evaluation, made before the checkpoint, is not made again. It continues bit for bit.
    void aStepZeroCheckpointResumes()
    {
        QTemporaryDir dir;
        auto config = golden_project();
        config.training.steps = 3;
        config.eval.interval = 2;
        config.eval.batches = 1;
        config.training.checkpoint_dir = dir.path().toStdString();
        Trainer first(config);
        QVERIFY(first.request_checkpoint());
        Recorder whole;
        first.run(whole);
        const QString zero = dir.filePath("step-00000000.pt");
        QVERIFY(QFile::exists(zero));
        Trainer resumed(config);
        resumed.load_checkpoint(zero.toStdString());
        Recorder rec;
        resumed.run(rec);
        const auto event = std::find_if(rec.events.begin(), rec.events.end(),
                                        [](const RunEvent& e) { return e.kind == EventKind::ResumedFromCheckpoint; });
        QVERIFY(event != rec.events.end());
        QCOMPARE(event->step, int64_t(0));
        QCOMPARE(event->path, zero.toStdString());
        std::vector<int64_t> evaluated;
        for (const auto& e : rec.evals) evaluated.push_back(e.step);
        QCOMPARE(evaluated, (std::vector<int64_t>{2, 3}));
        QCOMPARE(whole.evals.size(), size_t(3)); // 0, 2, 3
        QCOMPARE(rec.steps.size(), size_t(3));
        for (size_t i = 0; i < 3; ++i) QCOMPARE(rec.steps[i].train_loss, whole.steps[i].train_loss);
    }

    // A resume on another executor (or device, GPU model, LibTorch) continues the run, but its
    // sums round differently: the resume says so, naming both. The same one says nothing.
    void aResumeOnAnotherExecutorSaysItIsNotBitIdentical()
    {
        QTemporaryDir dir;
        auto config = golden_project();
        config.training.steps = 2;
        config.eval.interval = 0;
        config.training.checkpoint_interval = 1;
        config.precision.backend = GemmBackend::Emulated;
        config.training.checkpoint_dir = dir.path().toStdString();
        {
            Trainer first(config);
            Recorder rec;
            first.run(rec);
        }
        const std::string one = dir.filePath("step-00000001.pt").toStdString();
        const auto resume_text = [&](GemmBackend backend) {
            auto again = config;
            again.precision.backend = backend;
            Trainer resumed(again);
            resumed.load_checkpoint(one);
            Recorder rec;
            resumed.run(rec);
            for (const auto& e : rec.events)
                if (e.kind == EventKind::ResumedFromCheckpoint) return e.text;
            return std::string("no resume event");
        };
        QCOMPARE(resume_text(GemmBackend::Emulated), std::string());
        const std::string libtorch = ", LibTorch " + engine_versions().libtorch;
        const std::string cpu = "the CPU (ATen's " + engine_versions().cpu_kernels + " kernels)";
        QCOMPARE(resume_text(GemmBackend::Native),
                 "trained on " + cpu + ", the emulated executor" + libtorch + ", continuing on " + cpu +
                     ", the native executor" + libtorch + ": not bit-identical to a run never stopped");
    }

    // ATen's CPU kernels are part of the record: a run resumed where ATen picks other vector
    // instructions says so (tests/test_cli.cpp resumes one for real). A record from before they
    // were named is held to what it named, so an old checkpoint resumed where it was made is
    // not called different.
    void arithmeticChangeNamesWhatDiffers()
    {
        const std::string avx512 = "the CPU (ATen's AVX512 kernels), the emulated executor, LibTorch 2.13.0";
        const std::string avx2 = "the CPU (ATen's AVX2 kernels), the emulated executor, LibTorch 2.13.0";
        const std::string unnamed = "the CPU, the emulated executor, LibTorch 2.13.0";
        QCOMPARE(arithmetic_change(avx512, avx512, unnamed), std::string());
        QCOMPARE(arithmetic_change(avx2, avx512, unnamed),
                 "trained on " + avx2 + ", continuing on " + avx512 + ": not bit-identical to a run never stopped");
        QCOMPARE(arithmetic_change(unnamed, avx512, unnamed), std::string());
        QCOMPARE(arithmetic_change("the CPU, the native executor, LibTorch 2.13.0", avx512, unnamed),
                 "trained on the CPU, the native executor, LibTorch 2.13.0, continuing on " + unnamed +
                     ": not bit-identical to a run never stopped");
        QCOMPARE(arithmetic_change("", avx512, unnamed), std::string()); // nothing recorded
        const std::string h100 = "NVIDIA H100 80GB HBM3 (sm_90, deterministic), the native executor, LibTorch 2.11.0";
        QCOMPARE(arithmetic_change(h100, avx512, unnamed),
                 "trained on " + h100 + ", continuing on " + avx512 + ": not bit-identical to a run never stopped");
    }

    void seedChangesTheRun()
    {
        auto config = golden_project();
        config.training.steps = 2;
        config.training.seed = 99;
        Trainer trainer(config);
        Recorder rec;
        trainer.run(rec);
        QVERIFY(std::abs(rec.steps[0].train_loss - read_golden()[0].loss) > 1e-4);
    }

    void stopCommandEndsAtAStepBoundary()
    {
        auto config = golden_project();
        config.training.steps = 1000;
        config.eval.interval = 0;
        Trainer trainer(config);
        struct Stopper : Recorder {
            Trainer* trainer = nullptr;
            void on_step(const StepMetrics& m) override
            {
                Recorder::on_step(m);
                if (m.step == 5) trainer->request_stop();
            }
        } rec;
        rec.trainer = &trainer;
        const RunSummary summary = trainer.run(rec);
        QVERIFY(summary.stopped_early);
        QCOMPARE(summary.steps_done, int64_t(5));
        QCOMPARE(rec.events.back().tag(), std::string("run_stopped"));
    }

    void learningRateSchedule_data()
    {
        QTest::addColumn<int>("step");
        QTest::addColumn<double>("expected");
        // lr 1e-3, min 1e-4, warmup 100, decay 2000 (shakespeare-char)
        QTest::newRow("first warmup step") << 0 << 1e-3 * 1.0 / 101.0;
        QTest::newRow("last warmup step") << 99 << 1e-3 * 100.0 / 101.0;
        QTest::newRow("cosine start") << 100 << 1e-3;
        QTest::newRow("cosine middle") << 1050 << 1e-4 + 0.5 * 9e-4;
        QTest::newRow("cosine end") << 2000 << 1e-4;
        QTest::newRow("after decay") << 5000 << 1e-4;
    }
    void learningRateSchedule()
    {
        QFETCH(int, step);
        QFETCH(double, expected);
        OptimizerConfig o;
        o.learning_rate = 1e-3;
        o.min_learning_rate = 1e-4;
        o.warmup_steps = 100;
        o.decay_steps = 2000;
        QVERIFY(std::abs(learning_rate_at(o, step) - expected) < 1e-12);
    }

    void samplesDecodeToCorpusCharacters()
    {
        auto config = golden_project();
        Trainer trainer(config);
        const std::string text = trainer.sample("The ", 40, 7);
        QCOMPARE(trainer.sample("The ", 40, 7), text); // seeded
        QVERIFY(text.size() >= 40);                    // 40 characters, all ASCII in this corpus
        const std::string corpus_chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ ,.;:'\"?\n";
        for (char c : text) QVERIFY2(corpus_chars.find(c) != std::string::npos, std::string(1, c).c_str());
    }
};

QTEST_GUILESS_MAIN(TestGolden)
#include "test_golden.moc"
