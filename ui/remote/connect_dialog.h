// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// File ▸ Connect…: the address of a remote run store (mantissa-train serve / run --serve) and
// its token. The token is remembered per host:port in the settings, and filled in again when
// that address is typed. OK stays disabled until both are well-formed; the reason shows.
// Plain http to a host other than this machine is allowed (a trusted lab network) but named
// for what it is: the token and every run cross the network readable by anyone on the path,
// so a warning shows and the button reads "Connect Unencrypted". The settings file that keeps
// the tokens is made readable by its owner only.

#include <QDialog>
#include <QUrl>

class QDialogButtonBox;
class QLabel;
class QLineEdit;
class QSettings;

namespace mantissa {

class ConnectDialog : public QDialog {
    Q_OBJECT

public:
    explicit ConnectDialog(QSettings& settings, QWidget* parent = nullptr);

    QUrl url() const;
    QString token() const;
    // The pinned certificate's SHA-256 (32 bytes) for a self-signed https server; empty when
    // the field is (the system's trust store decides). Remembered per host:port with the token.
    QByteArray certificateSha256() const;
    QString error() const { return error_; } // empty when OK is enabled
    QString warning() const { return warning_; } // non-empty for plain http off this machine
    // Remembers the token for the URL's host:port and the URL as the last one used.
    void remember();

    QLineEdit* urlEdit() const { return urlEdit_; }
    QLineEdit* tokenEdit() const { return tokenEdit_; }
    QLineEdit* certificateEdit() const { return certificateEdit_; }

    static QString settingsKey(const QUrl& url, const QString& what = QStringLiteral("token")); // "remote/hosts/HOST:PORT/token"

private:
    void urlEdited();
    void validate();

    QSettings& settings_;
    QString error_;
    QString warning_;
    QLineEdit* urlEdit_ = nullptr;
    QLineEdit* tokenEdit_ = nullptr;
    QLineEdit* certificateEdit_ = nullptr;
    QLabel* errorLabel_ = nullptr;
    QLabel* warningLabel_ = nullptr;
    QDialogButtonBox* buttons_ = nullptr;
};

} // namespace mantissa
