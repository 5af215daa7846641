package proxyadmin

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/procfs"
)

// newProcessCollector is the process_* series of client_golang's process collector, by the same
// names, help and types, read the cheap way on Linux: CPU from getrusage, memory from
// /proc/self/statm, the limits from getrlimit, the start time once. client_golang's collector read
// five files of /proc on every scrape (the process's stat, limits and network statistics, the
// machine's /proc/stat for the boot time), nearly half of a scrape's CPU. Left out are its
// process_network_{receive,transmit}_bytes_total, which are the whole network namespace's counters
// (/proc/self/net/netstat), not the process's.
func newProcessCollector() prometheus.Collector { return &linuxProcessCollector{} }

var (
	procCPUDesc       = prometheus.NewDesc("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", nil, nil)
	procOpenFDsDesc   = prometheus.NewDesc("process_open_fds", "Number of open file descriptors.", nil, nil)
	procMaxFDsDesc    = prometheus.NewDesc("process_max_fds", "Maximum number of open file descriptors.", nil, nil)
	procVsizeDesc     = prometheus.NewDesc("process_virtual_memory_bytes", "Virtual memory size in bytes.", nil, nil)
	procMaxVsizeDesc  = prometheus.NewDesc("process_virtual_memory_max_bytes", "Maximum amount of virtual memory available in bytes.", nil, nil)
	procRSSDesc       = prometheus.NewDesc("process_resident_memory_bytes", "Resident memory size in bytes.", nil, nil)
	procStartTimeDesc = prometheus.NewDesc("process_start_time_seconds", "Start time of the process since unix epoch in seconds.", nil, nil)
)

type linuxProcessCollector struct {
	startOnce sync.Once
	startTime float64 // 0 when it could not be read
}

func (c *linuxProcessCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{procCPUDesc, procOpenFDsDesc, procMaxFDsDesc, procVsizeDesc, procMaxVsizeDesc, procRSSDesc, procStartTimeDesc} {
		ch <- d
	}
}

func (c *linuxProcessCollector) Collect(ch chan<- prometheus.Metric) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		cpu := float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
		ch <- prometheus.MustNewConstMetric(procCPUDesc, prometheus.CounterValue, cpu)
	}
	if size, resident, ok := statm(); ok {
		ch <- prometheus.MustNewConstMetric(procVsizeDesc, prometheus.GaugeValue, size)
		ch <- prometheus.MustNewConstMetric(procRSSDesc, prometheus.GaugeValue, resident)
	}
	c.startOnce.Do(func() {
		if p, err := procfs.Self(); err == nil {
			if st, err := p.Stat(); err == nil {
				c.startTime, _ = st.StartTime()
			}
		}
	})
	if c.startTime > 0 {
		ch <- prometheus.MustNewConstMetric(procStartTimeDesc, prometheus.GaugeValue, c.startTime)
	}
	if fds, err := openFDs(); err == nil {
		ch <- prometheus.MustNewConstMetric(procOpenFDsDesc, prometheus.GaugeValue, float64(fds))
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil {
		ch <- prometheus.MustNewConstMetric(procMaxFDsDesc, prometheus.GaugeValue, float64(lim.Cur))
	}
	if err := syscall.Getrlimit(syscall.RLIMIT_AS, &lim); err == nil {
		ch <- prometheus.MustNewConstMetric(procMaxVsizeDesc, prometheus.GaugeValue, float64(lim.Cur))
	}
}

// statm reads the process's virtual and resident memory in bytes from /proc/self/statm.
func statm() (size, resident float64, ok bool) {
	data, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, 0, false
	}
	fields := strings.Fields(string(data))
	if len(fields) < 2 {
		return 0, 0, false
	}
	pages, err1 := strconv.ParseUint(fields[0], 10, 64)
	res, err2 := strconv.ParseUint(fields[1], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	page := float64(os.Getpagesize())
	return float64(pages) * page, float64(res) * page, true
}

// openFDs counts the entries of /proc/self/fd (the directory's own descriptor included, as
// client_golang counts it).
func openFDs() (int, error) {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return 0, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	return len(names), err
}
