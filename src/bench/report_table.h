// report_table.h — a small table of strings rendered as markdown or CSV, for benchmark reports.
#pragma once

#include <string>
#include <vector>

namespace ft {

class ReportTable {
 public:
  explicit ReportTable(std::vector<std::string> columns);
  // Cells in column order; throws ft::Error when the count differs from the columns.
  void add_row(std::vector<std::string> cells);
  std::string markdown() const;  // aligned GitHub-flavoured markdown
  std::string csv() const;       // RFC 4180 quoting where needed
  std::size_t rows() const { return rows_.size(); }

 private:
  std::vector<std::string> columns_;
  std::vector<std::vector<std::string>> rows_;
};

// A number with `digits` decimals ("12.35"); used for table cells.
std::string fixed(double value, int digits = 3);

}  // namespace ft
