#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "core/output_files.h"
#include "core/selection.h"
#include "core/step_ticket.h"

using namespace msprobe;

TEST(StepTickets, ReadsWhatWasPublished) {
  StepTickets tickets(StepTicket{0, -1, 7});
  EXPECT_EQ(tickets.current().step, 0);
  EXPECT_EQ(tickets.current().rank, -1);
  EXPECT_EQ(tickets.epoch(), 7u);
  tickets.publish(StepTicket{3, 2, 9});
  const StepTicket t = tickets.current();
  EXPECT_EQ(t.step, 3);
  EXPECT_EQ(t.rank, 2);
  EXPECT_EQ(t.epoch, 9u);
}

// A reader never sees half of one ticket and half of another: every ticket published here has
// step == epoch and rank == epoch % 5, so a torn read breaks the pattern.
TEST(StepTickets, AReadOverlappingAPublishIsNeverTorn) {
  StepTickets tickets(StepTicket{0, 0, 0});
  std::atomic<bool> done{false};
  std::atomic<int64_t> torn{0}, reads{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 3; ++r) {
    readers.emplace_back([&] {
      while (!done.load()) {
        const StepTicket t = tickets.current();
        if (t.step != static_cast<int64_t>(t.epoch) || t.rank != static_cast<int>(t.epoch % 5))
          ++torn;
        ++reads;
      }
    });
  }
  for (uint64_t e = 1; e <= 200000; ++e)
    tickets.publish(StepTicket{static_cast<int64_t>(e), static_cast<int>(e % 5), e});
  done = true;
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(torn.load(), 0) << "of " << reads.load() << " reads";
  EXPECT_EQ(tickets.current().step, 200000);
}

TEST(StepLocal, MovesOnOncePerNewEpochAndNotForARankChange) {
  StepTickets tickets(StepTicket{0, -1, 1});
  StepLocal local(&tickets);
  EXPECT_FALSE(local.moved_on()) << "made in the step it belongs to";
  tickets.publish(StepTicket{0, 3, 1});  // start() learned the rank: the same step
  EXPECT_FALSE(local.stale());
  EXPECT_FALSE(local.moved_on());
  tickets.publish(StepTicket{1, 3, 2});
  EXPECT_TRUE(local.stale());
  EXPECT_TRUE(local.moved_on());
  EXPECT_FALSE(local.moved_on()) << "once";
  EXPECT_FALSE(local.stale());
}

TEST(StepLocal, WithoutTicketsTheStepNeverMovesOn) {
  StepLocal local;
  EXPECT_FALSE(local.moved_on());
  EXPECT_FALSE(local.stale());
}

// The parts that follow the ticket: the end of a step touches none of them, and each clears what
// it kept of the last step at its first use in the next.
TEST(StepLocal, FileNamesGiveTheSameNamesAgainInTheNextStep) {
  StepTickets tickets(StepTicket{0, -1, 1});
  FileNames names(&tickets);
  EXPECT_EQ(names.claim("a"), "a");
  EXPECT_EQ(names.claim("a"), "a~2");
  tickets.publish(StepTicket{1, -1, 2});
  EXPECT_EQ(names.claim("a"), "a") << "a new step's folder holds none of the last step's files";
  EXPECT_EQ(names.claim("a"), "a~2");
}

TEST(StepLocal, TheSelectionsWindowAndMatchesAreTheStepsOwn) {
  StepTickets tickets(StepTicket{0, -1, 1});
  CollectSection section;
  section.scope = {"T.relu.0.forward", "T.add.0.forward"};
  section.list = {"relu"};
  Selection sel(section, Level::L1, "s", RiskLevel::All, false, ScopeForm::Window, &tickets);
  EXPECT_FALSE(sel.begin("T.mul.0.forward", "T.mul.0.backward", false).forward);
  EXPECT_TRUE(sel.begin("T.relu.0.forward", "T.relu.0.backward", false).forward);
  sel.end("T.relu.0.forward");
  EXPECT_FALSE(sel.unmatched().empty());  // scope[1] not reached yet
  sel.begin("T.add.0.forward", "T.add.0.backward", false);
  sel.end("T.add.0.forward");
  EXPECT_TRUE(sel.unmatched().empty());
  tickets.publish(StepTicket{1, -1, 2});
  // Nothing of the new step reached the selection: every entry is unmatched in it.
  EXPECT_EQ(sel.unmatched().size(), 2u);
  // The window opens again from its start: the last step left it closed.
  EXPECT_FALSE(sel.begin("T.mul.0.forward", "T.mul.0.backward", false).forward);
  EXPECT_TRUE(sel.begin("T.relu.0.forward", "T.relu.0.backward", false).forward);
}
