// report_table.cpp — markdown and CSV rendering of ReportTable.
#include "bench/report_table.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"

namespace ft {

ReportTable::ReportTable(std::vector<std::string> columns) : columns_(std::move(columns)) {
  FT_CHECK(!columns_.empty(), "ReportTable: expected at least one column");
}

void ReportTable::add_row(std::vector<std::string> cells) {
  FT_CHECK(cells.size() == columns_.size(), "ReportTable: expected ", columns_.size(), " cells, given ",
           cells.size());
  rows_.push_back(std::move(cells));
}

std::string ReportTable::markdown() const {
  std::vector<std::size_t> width(columns_.size());
  for (std::size_t c = 0; c < columns_.size(); ++c) {
    width[c] = std::max<std::size_t>(3, columns_[c].size());
    for (const auto& row : rows_) width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out = "|";
    for (std::size_t c = 0; c < cells.size(); ++c) out += " " + cells[c] + std::string(width[c] - cells[c].size(), ' ') + " |";
    return out + "\n";
  };
  std::string out = line(columns_) + "|";
  for (std::size_t c = 0; c < columns_.size(); ++c) out += std::string(width[c] + 2, '-') + "|";
  out += "\n";
  for (const auto& row : rows_) out += line(row);
  return out;
}

namespace {
std::string csv_cell(const std::string& cell) {
  if (cell.find_first_of(",\"\n") == std::string::npos) return cell;
  std::string out = "\"";
  for (char ch : cell) {
    if (ch == '"') out += '"';
    out += ch;
  }
  return out + "\"";
}
}  // namespace

std::string ReportTable::csv() const {
  auto line = [](const std::vector<std::string>& cells) {
    std::string out;
    for (std::size_t c = 0; c < cells.size(); ++c) {
      if (c) out += ',';
      out += csv_cell(cells[c]);
    }
    return out + "\n";
  };
  std::string out = line(columns_);
  for (const auto& row : rows_) out += line(row);
  return out;
}

std::string fixed(double value, int digits) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.*f", digits, value);
  return text;
}

}  // namespace ft
