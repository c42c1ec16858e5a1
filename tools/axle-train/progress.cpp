#include "progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <fmt/core.h>

namespace axle_train {

namespace {
using Clock = std::chrono::steady_clock;
double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string eta_str(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const int64_t t = static_cast<int64_t>(s + 0.5);
  return t >= 3600 ? fmt::format("{}h{:02d}m", t / 3600, int(t / 60 % 60))
                   : fmt::format("{}:{:02d}", t / 60, int(t % 60));
}
}  // namespace

Progress::Progress(std::string label, int64_t total, bool enabled)
    : label_(std::move(label)), total_(total), tty_(isatty(STDERR_FILENO) == 1),
      start_(Clock::now()), last_draw_(start_), enabled_(enabled) {}

Progress::~Progress() { finish(); }

void Progress::update(int64_t done, double loss) {
  done_ = done;
  if (std::isfinite(loss)) {
    loss_avg_ = have_loss_ ? 0.9 * loss_avg_ + 0.1 * loss : loss;
    have_loss_ = true;
  }
  const auto now = Clock::now();
  // A terminal is redrawn ~10 times a second; a log gets a line every 5 seconds.
  const double every = tty_ ? 0.1 : 5.0;
  if (seconds(now - last_draw_) >= every) {
    last_draw_ = now;
    draw(done, false);
  }
}

void Progress::draw(int64_t done, bool final) {
  if (!enabled_) return;
  const double el = seconds(Clock::now() - start_);
  const double ms = done > 0 ? 1e3 * el / done : 0;
  const double eta = done > 0 ? el / done * (total_ - done) : NAN;
  const std::string loss = have_loss_ ? fmt::format("{:.4f}", loss_avg_) : "-";
  const std::string rate = per_step_ > 0 && el > 0 ? fmt::format(" {:.0f} {}", per_step_ * done / el, unit_) : "";
  if (tty_) {
    constexpr int kWidth = 30;
    const int fill = total_ > 0 ? static_cast<int>(kWidth * std::min<int64_t>(done, total_) / total_) : 0;
    std::string bar(fill, '=');
    if (fill < kWidth) bar += '>' + std::string(kWidth - fill - 1, ' ');
    std::fprintf(stderr, "\r\033[K%s [%s] %lld/%lld loss %s %.1f ms/step%s ETA %s", label_.c_str(), bar.c_str(),
                 static_cast<long long>(done), static_cast<long long>(total_), loss.c_str(), ms, rate.c_str(),
                 eta_str(eta).c_str());
    if (final) std::fputs("\r\033[K", stderr);
  } else if (!final) {
    std::fprintf(stderr, "%s step %lld/%lld loss %s %.1f ms/step%s ETA %s\n", label_.c_str(),
                 static_cast<long long>(done), static_cast<long long>(total_), loss.c_str(), ms, rate.c_str(),
                 eta_str(eta).c_str());
  }
  std::fflush(stderr);
}

void Progress::set_units(double per_step, std::string unit) {
  per_step_ = per_step;
  unit_ = std::move(unit);
}

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  if (tty_) draw(done_, true);
}

}  // namespace axle_train
