// world_table: each rank describes itself and its groups in a few lines of text, rank 0
// gathers them (MPI_Gatherv over the world's group-creation communicator, on the calling
// thread like group creation) and lays them out.
#include "comm/world_table.h"

#include <mpi.h>

#include <algorithm>
#include <iterator>
#include <cstdio>
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

// This rank's lines: "host\tnode\tlocal rank\tdevice", then per group
// "name\tworld ranks\tnote\tparent\tgroup rank": a group's note says how it all-reduces; its
// host groups follow it with the note "host" or "across" and its name as their parent; the
// group rank is what the group itself says this rank is.
std::string describe_rank(const std::string& device) {
  const InitInfo& me = info();
  std::ostringstream text;
  text << me.host << '\t' << me.node << '\t' << me.local_rank << '\t' << device << '\n';
  auto describe = [&](const ProcessGroup& group, const std::string& note, const std::string& parent) {
    text << group.name() << '\t';
    for (int r : group.world_ranks()) text << r << ' ';
    text << '\t' << note << '\t' << parent << '\t' << group.rank() << '\n';
  };
  for (const auto& group : live_mpi_groups()) {
    describe(*group, group->all_reduce_text(), "");
    if (const GroupPtr& host = group->host_groups().host) describe(*host, "host", group->name());
    if (const GroupPtr& across = group->host_groups().across) describe(*across, "across", group->name());
  }
  return text.str();
}

// The tab-separated fields of a line, empty ones included.
std::vector<std::string> fields_of(const std::string& line) {
  std::vector<std::string> f;
  for (size_t begin = 0, end = 0; end != std::string::npos; begin = end + 1) {
    end = line.find('\t', begin);
    f.push_back(line.substr(begin, end == std::string::npos ? end : end - begin));
  }
  return f;
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
  std::vector<std::vector<std::string>> rows;  // by world rank: host, node, local rank, device
  std::vector<Group> groups;
  auto group_named = [&](const std::string& name) {
    return std::find_if(groups.begin(), groups.end(), [&](const Group& g) { return g.name == name; });
  };
  for (size_t world_rank = 0; world_rank < texts.size(); ++world_rank) {
    std::istringstream lines(texts[world_rank]);
    std::string line;
    std::getline(lines, line);
    rows.push_back(fields_of(line));
    rows.back().resize(4);
    while (std::getline(lines, line)) {
      std::vector<std::string> f = fields_of(line);  // name, world ranks, note, parent, group rank
      f.resize(5);
      auto group = group_named(f[0]);
      if (f[3].empty()) {
        if (group == groups.end()) {
          std::istringstream ranks(f[1]);
          std::vector<std::string> members{std::istream_iterator<std::string>(ranks), {}};
          groups.push_back({f[0], f[2], members, std::vector<std::string>(members.size(), "?"), {}, {}});
          group = groups.end() - 1;
        }
        auto member = std::find(group->members.begin(), group->members.end(), std::to_string(world_rank));
        if (member != group->members.end()) group->group_ranks[member - group->members.begin()] = f[4];
      } else if (auto parent = group_named(f[3]); parent != groups.end()) {
        std::vector<std::string>& names = f[2] == "host" ? parent->hosts : parent->acrosses;
        if (std::find(names.begin(), names.end(), f[0]) == names.end()) names.push_back(f[0]);
      }
    }
  }
  std::set<std::string> hosts;
  size_t host_width = 4;
  for (const auto& row : rows) {
    hosts.insert(row[0]);
    host_width = std::max(host_width, row[0].size());
  }
  std::ostringstream out;
  out << "world: " << rows.size() << " rank" << (rows.size() == 1 ? "" : "s") << " on " << hosts.size()
      << " host" << (hosts.size() == 1 ? "" : "s") << '\n';
  out << "  rank  " << pad("host", host_width, false) << "  node  local rank  device\n";
  for (size_t r = 0; r < rows.size() && r < kListed; ++r) {
    const auto& f = rows[r];
    out << "  " << pad(std::to_string(r), 4, true) << "  " << pad(f[0], host_width, false) << "  "
        << pad(f[1], 4, true) << "  " << pad(f[2], 10, true) << "  " << f[3] << '\n';
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
