// world_table: each rank describes itself and its groups in a JSON object, rank 0
// gathers them (MPI_Gatherv over the world's group-creation communicator, on the calling
// thread like group creation) and lays them out.
#include "comm/world_table.h"

#include <mpi.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <vector>

#include "comm/dist.h"
#include "comm/mpi_check.h"
#include "comm/mpi_process_group.h"

namespace dpt::dist {
namespace {

constexpr size_t kListed = 64;  // rows of the world, and columns of a group, before "... (N more)"

constexpr size_t kSubGroupsListed = 16;  // host or across groups of a group, before "... (N more)"

// This rank's description: {"host", "node", "local_rank", "device", "groups": [{"name",
// "world_ranks", "note", "parent", "rank"}]}: a group's note says how it all-reduces; its host
// groups follow it with the note "host" or "across" and its name as their parent; "rank" is
// what the group itself says this rank is.
std::string describe_rank(const std::string& device) {
  const InitInfo& me = info();
  nlohmann::json groups = nlohmann::json::array();
  auto describe = [&](const ProcessGroup& group, const std::string& note, const std::string& parent) {
    groups.push_back({{"name", group.name()},
                      {"world_ranks", group.world_ranks()},
                      {"note", note},
                      {"parent", parent},
                      {"rank", group.rank()}});
  };
  for (const auto& group : live_mpi_groups()) {
    describe(*group, group->all_reduce_text(), "");
    if (const GroupPtr& host = group->host_groups().host) describe(*host, "host", group->name());
    if (const GroupPtr& across = group->host_groups().across) describe(*across, "across", group->name());
  }
  const nlohmann::json mine = {{"host", me.host},
                               {"node", std::to_string(me.node)},
                               {"local_rank", std::to_string(me.local_rank)},
                               {"device", device},
                               {"groups", std::move(groups)}};
  return mine.dump();
}

// "  host groups: world.host[0,1] world.host[2,3]" (the names hold the members' world ranks in
// group-rank order); "" for none.
std::string sub_group_line(const char* kind, const std::vector<std::string>& names) {
  if (names.empty()) return "";
  std::string line = std::string("  ") + kind + " groups:";
  for (size_t k = 0; k < names.size() && k < kSubGroupsListed; ++k) line += " " + names[k];
  if (names.size() > kSubGroupsListed)
    line += " ... (" + std::to_string(names.size() - kSubGroupsListed) + " more)";
  return line + '\n';
}

// Every rank's text on rank 0 (empty elsewhere).
std::vector<std::string> gather_on_rank0(const std::string& mine) {
  const std::shared_ptr<MpiProcessGroup> world_group = live_mpi_groups().front();
  MPI_Comm comm = world_group->creation_comm();
  const int size = world_group->size(), rank = world_group->rank();
  int length = static_cast<int>(mine.size());
  std::vector<int> lengths(static_cast<size_t>(size)), offsets(static_cast<size_t>(size));
  MPI_CHECK(MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, comm));
  int total = 0;
  for (int r = 0; r < size; ++r) {
    offsets[r] = total;
    total += lengths[r];
  }
  std::string all(rank == 0 ? static_cast<size_t>(total) : 0, '\0');
  MPI_CHECK(MPI_Gatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR,
                        0, comm));
  std::vector<std::string> texts;
  if (rank == 0)
    for (int r = 0; r < size; ++r) texts.push_back(all.substr(offsets[r], lengths[r]));
  return texts;
}

std::string pad(const std::string& text, size_t width, bool right) {
  const std::string spaces(width > text.size() ? width - text.size() : 0, ' ');
  return right ? spaces + text : text + spaces;
}

}  // namespace

std::string world_table(const std::string& device) {
  const std::vector<std::string> texts = gather_on_rank0(describe_rank(device));
  if (texts.empty()) return "";
  struct Group {
    std::string name, note;
    std::vector<std::string> members;          // world ranks
    std::vector<std::string> group_ranks;      // by member: the rank its group gave it ("?": no report)
    std::vector<std::string> hosts, acrosses;  // its host groups' names
  };
  std::vector<nlohmann::json> rows;  // by world rank: describe_rank's
  std::vector<Group> groups;
  auto group_named = [&](const std::string& name) {
    return std::find_if(groups.begin(), groups.end(), [&](const Group& g) { return g.name == name; });
  };
  for (size_t world_rank = 0; world_rank < texts.size(); ++world_rank) {
    rows.push_back(nlohmann::json::parse(texts[world_rank]));
    for (const nlohmann::json& g : rows.back()["groups"]) {
      const std::string name = g["name"], note = g["note"], parent_name = g["parent"];
      auto group = group_named(name);
      if (parent_name.empty()) {
        if (group == groups.end()) {
          std::vector<std::string> members;
          for (int r : g["world_ranks"]) members.push_back(std::to_string(r));
          groups.push_back({name, note, members, std::vector<std::string>(members.size(), "?"), {}, {}});
          group = groups.end() - 1;
        }
        auto member = std::find(group->members.begin(), group->members.end(), std::to_string(world_rank));
        if (member != group->members.end())
          group->group_ranks[member - group->members.begin()] = std::to_string(g["rank"].get<int>());
      } else if (auto parent = group_named(parent_name); parent != groups.end()) {
        std::vector<std::string>& names = note == "host" ? parent->hosts : parent->acrosses;
        if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
      }
    }
  }
  std::set<std::string> hosts;
  size_t host_width = 4;
  for (const auto& row : rows) {
    hosts.insert(row["host"]);
    host_width = std::max(host_width, row["host"].get_ref<const std::string&>().size());
  }
  std::ostringstream out;
  out << "world: " << rows.size() << " rank" << (rows.size() == 1 ? "" : "s") << " on " << hosts.size()
      << " host" << (hosts.size() == 1 ? "" : "s") << '\n';
  out << "  rank  " << pad("host", host_width, false) << "  node  local rank  device\n";
  for (size_t r = 0; r < rows.size() && r < kListed; ++r) {
    const auto& f = rows[r];
    out << "  " << pad(std::to_string(r), 4, true) << "  " << pad(f["host"], host_width, false) << "  "
        << pad(f["node"], 4, true) << "  " << pad(f["local_rank"], 10, true) << "  "
        << f["device"].get_ref<const std::string&>() << '\n';
  }
  if (rows.size() > kListed) out << "  ... (" << rows.size() - kListed << " more)\n";
  for (const auto& [name, note, members, group_ranks, host_groups, across_groups] : groups) {
    size_t width = 1;
    for (const std::string& m : members) width = std::max(width, m.size());
    out << "group " << name << ": " << members.size() << " rank" << (members.size() == 1 ? "" : "s")
        << (note.empty() ? "" : "; " + note) << '\n';
    std::string world_row = "  world rank", group_row = "  group rank";
    for (size_t g = 0; g < members.size() && g < kListed; ++g) {
      world_row += "  " + pad(members[g], width, true);
      group_row += "  " + pad(group_ranks[g], width, true);
    }
    if (members.size() > kListed) {
      world_row += "  ... (" + std::to_string(members.size() - kListed) + " more)";
      group_row += "  ...";
    }
    out << world_row << '\n' << group_row << '\n';
    out << sub_group_line("host", host_groups) << sub_group_line("across", across_groups);
  }
  return out.str();
}

}  // namespace dpt::dist
