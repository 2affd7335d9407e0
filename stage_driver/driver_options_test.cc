#include "stage_driver/driver_options.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/util/files.h"

namespace baton {
namespace {

using Groups = std::vector<std::vector<std::string>>;

TEST(WorkerGroupsTest, OneListSemicolonGroupsAndAClusterFileGiveTheSameWorkers) {
  auto list = ParseWorkerGroups("a:1,b:1, c:1,d:1");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(*list, (Groups{{"a:1", "b:1", "c:1", "d:1"}}));

  auto grouped = ParseWorkerGroups("a:1,b:1; c:1,d:1");
  ASSERT_TRUE(grouped.ok()) << grouped.status();
  EXPECT_EQ(*grouped, (Groups{{"a:1", "b:1"}, {"c:1", "d:1"}}));

  const std::string path = JoinPath(::testing::TempDir(), "cluster.txt");
  ASSERT_TRUE(
      WriteFileAtomic(path, "# two PCs, two cards each\npcA:7001 pcA:7002  # replica 0\n\npcB:7001,pcB:7002\n").ok());
  auto file = ParseWorkerGroups("@" + path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(*file, (Groups{{"pcA:7001", "pcA:7002"}, {"pcB:7001", "pcB:7002"}}));

  StageDriverOptions options;
  options.stages = 2;
  options.replicas = 0;  // "take the run's": the groups decide
  ASSERT_TRUE(ApplyWorkerGroups(*file, options).ok());
  EXPECT_EQ(options.replicas, 2);
  EXPECT_EQ(options.workers, (std::vector<std::string>{"pcA:7001", "pcA:7002", "pcB:7001", "pcB:7002"}));
  EXPECT_TRUE(CheckStageDriverOptions(options).ok());
}

// Groups of different sizes are replicas of different stage counts (a 48 GB card beside two 24 GB ones).
TEST(WorkerGroupsTest, GroupsOfDifferentSizesAreReplicasOfDifferentStageCounts) {
  auto groups = ParseWorkerGroups("big:7001; small:7001,small:7002");
  ASSERT_TRUE(groups.ok()) << groups.status();
  StageDriverOptions options;
  options.stages = 2;
  options.replicas = 0;
  ASSERT_TRUE(ApplyWorkerGroups(*groups, options).ok());
  EXPECT_EQ(options.replicas, 2);
  EXPECT_EQ(options.replica_stages, (std::vector<int>{1, 2}));
  EXPECT_TRUE(options.UnequalReplicas());
  EXPECT_EQ(options.StagesOf(0), 1);
  EXPECT_EQ(options.StagesOf(1), 2);
  EXPECT_EQ(options.FirstWorker(1), 1);
  EXPECT_EQ(options.TotalWorkers(), 3);
  EXPECT_TRUE(CheckStageDriverOptions(options).ok());
  options.workers.pop_back();
  EXPECT_NE(CheckStageDriverOptions(options).message().find("2 addresses for 2 replicas of 1+2 stages"),
            std::string::npos)
      << CheckStageDriverOptions(options);
}

TEST(WorkerGroupsTest, GroupsThatDoNotFitAreRefusedNamingTheGroup) {
  EXPECT_NE(ParseWorkerGroups("a:1,b:1;;c:1").status().message().find("replica group 1 lists no address"),
            std::string::npos);
  EXPECT_FALSE(ParseWorkerGroups("@/nonexistent/cluster.txt").ok());
  const std::string empty = JoinPath(::testing::TempDir(), "empty_cluster.txt");
  ASSERT_TRUE(WriteFileAtomic(empty, "# nothing\n").ok());
  EXPECT_NE(ParseWorkerGroups("@" + empty).status().message().find("no replica lines"), std::string::npos);

  StageDriverOptions options;
  options.stages = 2;
  options.replicas = 0;
  absl::Status short_group = ApplyWorkerGroups(Groups{{"a:1"}, {"c:1"}}, options);
  EXPECT_NE(short_group.message().find("replica 0 lists 1 addresses for --stages 2 (a:1)"), std::string::npos)
      << short_group;
  options.replicas = 3;
  absl::Status count = ApplyWorkerGroups(Groups{{"a:1", "b:1"}, {"c:1", "d:1"}}, options);
  EXPECT_NE(count.message().find("2 replica groups but --replicas is 3"), std::string::npos) << count;
}

}  // namespace
}  // namespace baton
