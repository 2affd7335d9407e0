#include "core/util/stop_signals.h"

#include <gtest/gtest.h>

#include <csignal>

namespace baton {
namespace {

TEST(StopSignalsTest, TheFirstSignalAsksToStopAndASecondExitsWhenAskedTo) {
  EXPECT_EXIT(
      {
        StopFlags& flags = InstallStopSignals(SecondSignal::kExits);
        std::raise(SIGTERM);
        if (!flags.stop || flags.signal != SIGTERM) std::_Exit(2);
        std::raise(SIGINT);
        std::_Exit(3);  // not reached: the second signal exits with 128 + SIGINT
      },
      testing::ExitedWithCode(128 + SIGINT), "");
}

TEST(StopSignalsTest, AServerOnlyEverStops) {
  EXPECT_EXIT(
      {
        StopFlags& flags = InstallStopSignals(SecondSignal::kStops);
        std::raise(SIGINT);
        std::raise(SIGTERM);
        std::_Exit(flags.stop && flags.signal == 0 ? 0 : 2);
      },
      testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace baton
