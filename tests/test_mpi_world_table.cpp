// dist::world_table under mpirun -np 2/3/4 and across 2 simulated hosts x 4 (tools/cluster.sh):
// rank 0's table against what every rank reports of itself (its hostname; its host's number
// and its local rank worked out from the hostnames), and the groups with their members and
// group-relative ranks: the world, the even ranks, and the odd ranks in reverse order, a group
// rank 0 is not a member of; across hosts, the world's all-reduce and its host groups.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "comm/dist.h"
#include "comm/mpi_process_group.h"
#include "comm/world_table.h"

using namespace dpt::dist;

namespace {

std::vector<std::string> words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

std::vector<std::string> numbers(const std::vector<int>& values) {
  std::vector<std::string> out;
  for (int v : values) out.push_back(std::to_string(v));
  return out;
}

// The two rows under "group NAME: ..." ("world rank ..." and "group rank ..."), as words.
std::pair<std::vector<std::string>, std::vector<std::string>> group_rows(const std::string& table,
                                                                         const std::string& name) {
  std::istringstream in(table);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("group " + name + ": ", 0) != 0) continue;
    std::string world_row, group_row;
    std::getline(in, world_row);
    std::getline(in, group_row);
    return {words(world_row), words(group_row)};
  }
  ADD_FAILURE() << "no group " << name << " in\n" << table;
  return {};
}

// The line that starts "group NAME: " and the `count` lines after it.
std::vector<std::string> group_lines(const std::string& table, const std::string& name, int count) {
  std::istringstream in(table);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("group " + name + ": ", 0) != 0) continue;
    std::vector<std::string> lines = {line};
    for (int k = 0; k < count && std::getline(in, line); ++k) lines.push_back(line);
    return lines;
  }
  return {};
}

std::string bracketed(const std::vector<int>& ranks) {
  std::string text = "[";
  for (size_t k = 0; k < ranks.size(); ++k) {
    if (k > 0) text += ',';
    text += std::to_string(ranks[k]);
  }
  return text + "]";
}

}  // namespace

TEST(WorldTable, RanksHostsAndGroups) {
  GroupPtr w = world();
  const int n = w->size(), r = w->rank();
  std::vector<int> evens, odds_reversed;
  for (int k = 0; k < n; ++k) (k % 2 ? odds_reversed : evens).push_back(k);
  std::reverse(odds_reversed.begin(), odds_reversed.end());
  GroupPtr even_group = new_group(evens);
  GroupPtr odd_group = split(w, r % 2 ? 1 : -1, -r);
  const std::string table = world_table("device-" + std::to_string(7 * r));

  // The reference: every rank's hostname; a host's number is the order of its lowest rank.
  char mine[256] = {};
  gethostname(mine, sizeof mine - 1);
  std::vector<char> names(256 * static_cast<size_t>(n));
  MPI_Allgather(mine, 256, MPI_CHAR, names.data(), 256, MPI_CHAR, MPI_COMM_WORLD);
  if (r != 0) {
    EXPECT_EQ(table, "");
    return;
  }
  std::printf("%s", table.c_str());
  std::vector<std::string> hosts;
  std::istringstream lines(table);
  std::string line;
  std::getline(lines, line);
  std::getline(lines, line);
  EXPECT_EQ(words(line), (std::vector<std::string>{"rank", "host", "node", "local", "rank", "device"}));
  for (int k = 0; k < n; ++k) {
    const std::string host(names.data() + 256 * k);
    if (std::find(hosts.begin(), hosts.end(), host) == hosts.end()) hosts.push_back(host);
    int local_rank = 0;
    for (int j = 0; j < k; ++j) local_rank += std::string(names.data() + 256 * j) == host;
    const int node = static_cast<int>(std::find(hosts.begin(), hosts.end(), host) - hosts.begin());
    std::getline(lines, line);
    EXPECT_EQ(words(line),
              (std::vector<std::string>{std::to_string(k), host, std::to_string(node),
                                        std::to_string(local_rank), "device-" + std::to_string(7 * k)}))
        << table;
  }
  EXPECT_EQ(table.substr(0, table.find('\n')), "world: " + std::to_string(n) + " rank" + (n > 1 ? "s" : "") +
                                                   " on " + std::to_string(hosts.size()) + " host" +
                                                   (hosts.size() > 1 ? "s" : ""));

  std::vector<int> all(n);
  for (int k = 0; k < n; ++k) all[k] = k;
  std::vector<int> positions(all);
  auto expect_group = [&](const std::string& name, const std::vector<int>& members) {
    auto [world_row, group_row] = group_rows(table, name);
    std::vector<std::string> want_world = numbers(members), want_group = numbers(positions);
    want_world.resize(members.size());
    want_group.resize(members.size());
    want_world.insert(want_world.begin(), {"world", "rank"});
    want_group.insert(want_group.begin(), {"group", "rank"});
    EXPECT_EQ(world_row, want_world) << table;
    EXPECT_EQ(group_row, want_group) << table;
  };
  expect_group("world", all);
  // Across hosts (each holding the same number of ranks): how the world all-reduces, and its
  // host groups (a host's ranks) and across groups (the ranks of one local index), by name.
  std::vector<std::vector<int>> on_host(hosts.size());
  for (int k = 0; k < n; ++k) {
    const std::string host(names.data() + 256 * k);
    on_host[std::find(hosts.begin(), hosts.end(), host) - hosts.begin()].push_back(k);
  }
  if (hosts.size() > 1 && n % hosts.size() == 0) {
    const size_t per_host = n / hosts.size();
    std::string host_line = "  host groups:", across_line = "  across groups:";
    for (const auto& members : on_host) host_line += " world.host" + bracketed(members);
    for (size_t l = 0; l < per_host; ++l) {
      std::vector<int> members;
      for (const auto& host_members : on_host) members.push_back(host_members[l]);
      across_line += " world.across" + bracketed(members);
    }
    std::vector<std::string> want = {"group world: " + std::to_string(n) + " ranks; " +
                                         (per_host > 1 ? "hierarchical" : "flat") +
                                         " all-reduce: " + std::to_string(hosts.size()) + " hosts x " +
                                         std::to_string(per_host) + " rank" + (per_host > 1 ? "s" : ""),
                                     "", ""};
    if (per_host > 1) want.push_back(host_line);
    want.push_back(across_line);
    std::vector<std::string> got = group_lines(table, "world", static_cast<int>(want.size()) - 1);
    got.resize(want.size());
    got[1] = got[2] = "";  // the rank rows, checked above
    EXPECT_EQ(got, want) << table;
  }
  expect_group(even_group->name(), evens);
  if (n > 1) expect_group("split(color 1)" + ranks_str(odds_reversed), odds_reversed);
}
