// SPDX-License-Identifier: GPL-3.0-or-later
// The data pipeline: tokenisation, splits, nanoGPT .bin files, synthetic data.

#include <QtTest>

#include <QTemporaryDir>

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "dataset.h"

using namespace mantissa;

namespace {

ProjectConfig text_project(const QString& dir, const std::string& tokenizer, double val_fraction = 0.1)
{
    ProjectConfig c;
    c.base_dir = dir.toStdString();
    c.data.kind = DataKind::Text;
    c.data.path = "corpus.txt";
    c.data.tokenizer = tokenizer;
    c.data.val_fraction = val_fraction;
    c.model.context_length = 4;
    return c;
}

void write_file(const QString& path, const QByteArray& bytes)
{
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(bytes);
}

// A nanoGPT .bin file: native little-endian uint16 ids.
void write_bin(const QString& path, const std::vector<uint16_t>& ids)
{
    std::ofstream(path.toStdString(), std::ios::binary)
        .write(reinterpret_cast<const char*>(ids.data()), static_cast<std::streamsize>(ids.size() * 2));
}

// A project reading train.bin and val.bin from `dir`.
ProjectConfig bin_project(const QString& dir, int64_t vocab_size)
{
    ProjectConfig c;
    c.base_dir = dir.toStdString();
    c.data.kind = DataKind::TokenBin;
    c.data.dir = ".";
    c.data.vocab_size = vocab_size;
    c.model.context_length = 4;
    return c;
}

} // namespace

class TestData : public QObject {
    Q_OBJECT
private slots:
    void charTokenizerSortsCodePoints()
    {
        QTemporaryDir dir;
        // "é" (U+00E9) and "→" (U+2192) are multi-byte: one token each.
        write_file(dir.filePath("corpus.txt"), QString("baé→ab\nbaé→ab\n").toUtf8());
        const auto s = load_token_splits(text_project(dir.path(), "char", 0.5));
        QCOMPARE(s.vocabulary.size(), int64_t(5)); // \n a b é →
        const std::vector<uint16_t> expected_train = {2, 1, 3, 4, 1, 2, 0};
        const std::vector<uint16_t> expected_val = {2, 1, 3, 4, 1, 2, 0};
        QVERIFY(s.train == expected_train);
        QVERIFY(s.val == expected_val);
        QCOMPARE(s.vocabulary.decode({2, 1, 3, 4}), std::string("baé→"));
        QVERIFY(s.vocabulary.encode("é→a") == std::vector<int64_t>({3, 4, 1}));
    }

    void splitIsNinetyTen()
    {
        QTemporaryDir dir;
        write_file(dir.filePath("corpus.txt"), QByteArray(1000, 'x') + QByteArray(1000, 'y'));
        const auto s = load_token_splits(text_project(dir.path(), "char"));
        QCOMPARE(s.train.size(), size_t(1800));
        QCOMPARE(s.val.size(), size_t(200));
        QCOMPARE(int(s.val.front()), 1); // the tail of the file: all 'y'
    }

    void byteTokenizerKeepsRawBytes()
    {
        QTemporaryDir dir;
        write_file(dir.filePath("corpus.txt"), QString("é").toUtf8().repeated(10));
        const auto s = load_token_splits(text_project(dir.path(), "byte", 0.5));
        QCOMPARE(s.vocabulary.size(), int64_t(256));
        QCOMPARE(s.train.size(), size_t(10));
        QCOMPARE(int(s.train[0]), 0xC3);
        QCOMPARE(int(s.train[1]), 0xA9);
        QCOMPARE(s.vocabulary.decode({0xC3, 0xA9}), std::string("é"));
        // What the model writes need not be UTF-8; a sample is text from there on (events, the
        // store's JSON): a raw byte failed the run at its first sample. Each byte that starts
        // no character reads U+FFFD.
        QCOMPARE(s.vocabulary.decode({0xC3}), std::string("\uFFFD"));
        QCOMPARE(s.vocabulary.decode({0xFF, 'a', 0xC3, 0xA9, 0x80, 0xE2, 0x82}),
                 std::string("\uFFFD" "a" "é" "\uFFFD\uFFFD\uFFFD"));
        QCOMPARE(s.vocabulary.decode({0xED, 0xA0, 0x80}), std::string("\uFFFD\uFFFD\uFFFD")); // a surrogate
    }

    void utf8DecoderRejectsMalformedInput_data()
    {
        QTest::addColumn<QByteArray>("bytes");
        QTest::addColumn<int>("offset");
        QTest::newRow("lone continuation") << QByteArray("ab\x80", 3) << 2;
        QTest::newRow("truncated sequence") << QByteArray("a\xe2\x86", 3) << 1;
        QTest::newRow("overlong slash") << QByteArray("\xc0\xaf", 2) << 0;
        QTest::newRow("surrogate") << QByteArray("xx\xed\xa0\x80", 5) << 2;
        QTest::newRow("invalid lead") << QByteArray("\xff", 1) << 0;
    }
    void utf8DecoderRejectsMalformedInput()
    {
        QFETCH(QByteArray, bytes);
        QFETCH(int, offset);
        try {
            decode_utf8(bytes.toStdString(), "t");
            QFAIL("accepted malformed UTF-8");
        } catch (const ConfigError& e) {
            QCOMPARE(QString(e.what()), QString("t is not valid UTF-8 (byte offset %1)").arg(offset));
        }
    }

    void utf8RoundTrips()
    {
        const std::string text = "a\u00e9\u2192\U0001F600z";
        const auto cps = decode_utf8(text, "t");
        QCOMPARE(cps.size(), size_t(5));
        QCOMPARE(uint32_t(cps[3]), uint32_t(0x1F600));
        QCOMPARE(encode_utf8(cps), text);
    }

    void readsNanoGptBinFiles()
    {
        QTemporaryDir dir;
        const std::vector<uint16_t> train = {1, 2, 3, 4, 5, 6, 7, 50000};
        const std::vector<uint16_t> val = {9, 8, 7, 6, 5};
        write_bin(dir.filePath("train.bin"), train);
        write_bin(dir.filePath("val.bin"), val);
        ProjectConfig c = bin_project(dir.path(), 50257);
        const auto s = load_token_splits(c);
        QVERIFY(s.train == train);
        QVERIFY(s.val == val);
        QCOMPARE(s.vocabulary.decode({1, 50000}), std::string("1 50000"));
        QVERIFY(s.train.mapped() && s.val.mapped()); // page cache, not a heap copy per process
        write_file(dir.filePath("corpus.txt"), QByteArray(20, 'x'));
        QVERIFY(!load_token_splits(text_project(dir.path(), "byte", 0.5)).train.mapped());

        c.data.vocab_size = 50000; // token 50000 does not fit
        try {
            load_token_splits(c);
            QFAIL("accepted a token id >= vocab_size");
        } catch (const ConfigError& e) {
            QVERIFY2(QString(e.what()).contains("data.vocab_size: 50000 is too small"), e.what());
            QVERIFY2(QString(e.what()).contains("token id 50000"), e.what());
            QVERIFY2(QString(e.what()).contains("train.bin'"), e.what()); // names the file
        }
    }

    // A split keeps its mapping alive in every copy (the trainer's sampler holds one), and a
    // new train.bin renamed over the old one leaves a loaded run reading the file it started on.
    void aMappedSplitOutlivesItsFileAndItsSplits()
    {
        QTemporaryDir dir;
        const std::vector<uint16_t> first = {1, 2, 3, 4, 5, 6}, second = {7, 7, 7, 7, 7, 7};
        write_bin(dir.filePath("train.bin"), first);
        write_bin(dir.filePath("val.bin"), first);
        const ProjectConfig c = bin_project(dir.path(), 16);
        TokenIds kept;
        {
            const auto s = load_token_splits(c);
            kept = s.train;
        }
        write_bin(dir.filePath("train.new"), second);
        QVERIFY(QFile::remove(dir.filePath("train.bin")));
        QVERIFY(QFile::rename(dir.filePath("train.new"), dir.filePath("train.bin")));
        QVERIFY(kept == first);
        QVERIFY(load_token_splits(c).train == second);

        write_bin(dir.filePath("val.bin"), {}); // an empty split is named, not mapped (mmap refuses 0 bytes)
        try {
            load_token_splits(c);
            QFAIL("accepted an empty val.bin");
        } catch (const ConfigError& e) {
            QVERIFY2(QString(e.what()).contains("the validation split of"), e.what());
            QVERIFY2(QString(e.what()).contains("is empty (val.bin)"), e.what());
        }
    }

    void oddSizedBinFileIsRejected()
    {
        QTemporaryDir dir;
        write_file(dir.filePath("train.bin"), QByteArray(101, '\0'));
        write_file(dir.filePath("val.bin"), QByteArray(100, '\0'));
        const ProjectConfig c = bin_project(dir.path(), 10);
        try {
            load_token_splits(c);
            QFAIL("accepted an odd-sized bin file");
        } catch (const ConfigError& e) {
            QVERIFY2(QString(e.what()).contains("odd number of bytes"), e.what());
            QVERIFY2(QString(e.what()).contains("train.bin'"), e.what()); // names the file
        }
    }

    // The validation lines share no operand pair with the training lines (at 2 digits, drawn
    // from all 10^4 pairs, 84% of them did), and every line is still right.
    void additionValidationPairsAreNotInTraining_data()
    {
        QTest::addColumn<int>("digits");
        QTest::newRow("1 digit: listed, 100 pairs") << 1;
        QTest::newRow("2 digits: listed") << 2;
        QTest::newRow("4 digits: rejected by hash") << 4;
    }
    void additionValidationPairsAreNotInTraining()
    {
        QFETCH(int, digits);
        const int64_t examples = 2000;
        const std::string text = make_addition_text(digits, examples, 1337, 0.1);
        QCOMPARE(make_addition_text(digits, examples, 1337, 0.1), text); // seeded
        std::istringstream lines(text);
        std::set<std::string> train_pairs;
        std::vector<std::string> val_pairs;
        std::string line;
        int64_t i = 0;
        for (; std::getline(lines, line); ++i) {
            const auto eq = line.find('=');
            const auto plus = line.find('+');
            QCOMPARE(std::stol(line.substr(eq + 1)), std::stol(line.substr(0, plus)) + std::stol(line.substr(plus + 1)));
            if (i < examples - 200) train_pairs.insert(line.substr(0, eq));
            else val_pairs.push_back(line.substr(0, eq));
        }
        QCOMPARE(i, examples);
        QCOMPARE(val_pairs.size(), size_t(200));
        for (const auto& p : val_pairs) QVERIFY2(!train_pairs.count(p), p.c_str());
        QVERIFY(train_pairs.size() > 5); // both splits still vary
        QVERIFY(std::set<std::string>(val_pairs.begin(), val_pairs.end()).size() > 1);
    }

    // The project's splits cut where the validation lines begin. A cut at 90% of the characters
    // fell 7 lines early in the default project, putting validation pairs in the training text.
    void projectSplitsSyntheticDataAtTheFirstValidationLine()
    {
        ProjectConfig c = load_project_file(MANTISSA_SOURCE_DIR "/projects/default.json");
        const std::string text = make_addition_text(c.data.digits, c.data.examples, c.training.seed, 0.1);
        const auto s = load_token_splits(c);
        const auto decoded = [&](const TokenIds& ids) { return s.vocabulary.decode({ids.begin(), ids.end()}); };
        const std::string train = decoded(s.train), val = decoded(s.val);
        QCOMPARE(train + val, text);
        QCOMPARE(std::count(val.begin(), val.end(), '\n'), std::ptrdiff_t(2000)); // 10% of 20,000 lines
        QCOMPARE(train.back(), '\n');
        QCOMPARE(addition_val_lines(20000, 0.1), int64_t(2000));
        QCOMPARE(addition_val_lines(20000, 0.0), int64_t(0));
    }

    // A split that takes almost every pair leaves the other none to draw: refused, naming the
    // setting, where it drew for ever (a read-only audit's project hung at its start).
    void additionSplitWithNoPairsLeftIsRefused()
    {
        const auto refusal = [](int64_t examples, double fraction) {
            try {
                make_addition_text(4, examples, 1337, fraction);
                return std::string("accepted");
            } catch (const ConfigError& e) {
                return std::string(e.what());
            }
        };
        const std::string refused = " split too few of the 10000x10000 pairs of 4-digit operands to draw from; take a "
                                    "fraction within [0.0001, 0.9999]";
        QCOMPARE(refusal(200000, 0.99999), "data.val_fraction: 0.99999 leaves the training" + refused);
        QCOMPARE(refusal(200000, 0.00001), "data.val_fraction: 1e-05 leaves the validation" + refused);
        // A split that no line takes is no refusal: 100 lines at 0.99999 are all validation lines.
        const std::string all_val = make_addition_text(4, 100, 1337, 0.99999);
        QCOMPARE(std::count(all_val.begin(), all_val.end(), '\n'), std::ptrdiff_t(100));
        const std::string most = make_addition_text(4, 100, 1337, 0.9999); // one in 10^4: drawn
        QCOMPARE(std::count(most.begin(), most.end(), '\n'), std::ptrdiff_t(100));
    }

    void additionTextIsCorrectArithmetic()
    {
        const std::string text = make_addition_text(3, 500, 42);
        QCOMPARE(make_addition_text(3, 500, 42), text); // seeded
        QVERIFY(make_addition_text(3, 500, 43) != text);
        std::istringstream lines(text);
        std::string line;
        int count = 0;
        while (std::getline(lines, line)) {
            const auto plus = line.find('+'), eq = line.find('=');
            QVERIFY(plus != std::string::npos && eq != std::string::npos);
            const long a = std::stol(line.substr(0, plus)), b = std::stol(line.substr(plus + 1, eq - plus - 1));
            QVERIFY(a >= 0 && a < 1000 && b >= 0 && b < 1000);
            QCOMPARE(std::stol(line.substr(eq + 1)), a + b);
            ++count;
        }
        QCOMPARE(count, 500);
    }

    void syntheticProjectHasAFixedVocabulary()
    {
        ProjectConfig c; // defaults: synthetic addition
        const auto s = load_token_splits(c);
        QCOMPARE(s.vocabulary.size(), int64_t(13)); // \n + 0-9 =
        QCOMPARE(s.vocabulary.decode({0, 1, 2, 3, 12}), std::string("\n+01="));
        QCOMPARE(std::count(s.train.begin(), s.train.end(), uint16_t(0)), std::ptrdiff_t(18000)); // lines
        QCOMPARE(std::count(s.val.begin(), s.val.end(), uint16_t(0)), std::ptrdiff_t(2000));
    }
};

QTEST_GUILESS_MAIN(TestData)
#include "test_data.moc"
