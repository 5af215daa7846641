package confidant

import (
	"fmt"
	"math"
	"time"

	"github.com/gantry-dev/gantry/pkg/awsconfig"
	"github.com/gantry-dev/gantry/pkg/settings"
)

// Config is where `gantry import confidant` reads Confidant's data. The region is the process's
// AWS_DEFAULT_REGION; the table and endpoint keep Confidant's own variable names, so the env file
// Confidant ran with configures the import unchanged.
type Config struct {
	// Table is Confidant's DynamoDB table (DYNAMODB_TABLE).
	Table string
	// ArchiveTable is the table Confidant's archive script moves disabled, unmapped credentials to
	// (DYNAMODB_TABLE_ARCHIVE); empty when the installation has none.
	ArchiveTable string
	// URL overrides the DynamoDB endpoint (DYNAMODB_URL: DynamoDB Local, a VPC endpoint).
	URL string
	// KMSURL overrides the endpoint of the AWS KMS that wrapped Confidant's data keys; empty means
	// KMS_URL, the one gantry itself uses with -kms=aws.
	KMSURL string
	// Workers is how many credentials are decrypted and written at once.
	Workers int
	// KMSRate caps the import's KMS Decrypt calls per second (0: no cap): its share of the account's
	// KMS request quota, which production shares (docs/migrating.md sizes it).
	KMSRate float64
	// ProgressInterval is how often a progress line is written when stderr is not a terminal (a
	// log); on a terminal one line is redrawn in place.
	ProgressInterval time.Duration
	// Quiet writes no progress at all, terminal or not (the report and failures still print).
	Quiet bool
}

// DefaultConfig reads no table until one is named.
func DefaultConfig() Config {
	return Config{Workers: DefaultWorkers, KMSRate: DefaultKMSRate, ProgressInterval: 10 * time.Second}
}

// The defaults are sized for AWS KMS's request quotas and the measured import rate
// (docs/migrating.md, "Speed"): Decrypt counts against the account's and Region's quota of
// symmetric cryptographic operations (5,500 per second or more, depending on the Region), shared
// with production.
const (
	// DefaultWorkers is enough to reach DefaultKMSRate at 10-20 ms per KMS call.
	DefaultWorkers = 16
	// DefaultKMSRate is about 5% of the smallest regional quota, and 500,000 revisions in about half
	// an hour.
	DefaultKMSRate = 300
)

const group = "import (gantry import confidant)"

// Settings declares the importer's settings for the settings table.
func (c *Config) Settings() settings.Part {
	return settings.Part{Settings: []settings.Setting{
		{Name: "dynamodb-table", Legacy: []string{"DYNAMODB_TABLE"}, Group: group, Value: settings.String(&c.Table), Usage: "Confidant's DynamoDB table, read (never written) by gantry import confidant"},
		{Name: "dynamodb-table-archive", Legacy: []string{"DYNAMODB_TABLE_ARCHIVE"}, Group: group, Value: settings.String(&c.ArchiveTable), Usage: "Confidant's archive table (its archive script's credentials), read by gantry import confidant into gantry's archive; empty: none"},
		{Name: "dynamodb-url", Legacy: []string{"DYNAMODB_URL"}, Group: group, Value: settings.String(&c.URL), Usage: "DynamoDB endpoint override of the import (DynamoDB Local, a VPC endpoint)"},
		{Name: "import-kms-url", Group: group, Value: settings.String(&c.KMSURL), Usage: "endpoint override of the AWS KMS that wrapped Confidant's data keys (empty: -kms-url)"},
		{Name: "import-workers", Group: group, Value: settings.Int(&c.Workers), Usage: "credentials the import decrypts and writes at once (each waits for one KMS Decrypt per revision: at 10 ms a call, workers x 100 revisions/s at most)"},
		{Name: "import-kms-rate", Group: group, Value: settings.Float(&c.KMSRate), Usage: "KMS Decrypt calls per second the import makes at most, its share of the account's KMS request quota for symmetric cryptographic operations (5,500/s or more per Region, shared with production); 0: no cap"},
		{Name: "import-progress-interval", Group: group, Value: settings.Duration(&c.ProgressInterval), Usage: "how often gantry import confidant writes a progress line (done/total, rate, ETA) to stderr when stderr is not a terminal; on a terminal one line is redrawn in place"},
		{Name: "import-quiet", Group: group, Value: settings.Bool(&c.Quiet), Usage: "no progress on stderr, terminal or not (the report still prints)"},
	}}
}

// Validate checks the settings the import needs; it is called by the import command only, so a
// server never needs a table.
func (c Config) Validate() error {
	if c.Table == "" {
		return fmt.Errorf("dynamodb-table: DYNAMODB_TABLE is required: the table Confidant writes")
	}
	if c.ArchiveTable != "" && c.ArchiveTable == c.Table {
		return fmt.Errorf("dynamodb-table-archive: DYNAMODB_TABLE_ARCHIVE is the same table as DYNAMODB_TABLE (%s)", c.Table)
	}
	if err := awsconfig.ValidateEndpoint(c.URL); err != nil {
		return fmt.Errorf("dynamodb-url: %w", err)
	}
	if err := awsconfig.ValidateEndpoint(c.KMSURL); err != nil {
		return fmt.Errorf("import-kms-url: %w", err)
	}
	if c.Workers < 1 || c.Workers > 64 {
		return fmt.Errorf("import-workers: %d is not between 1 and 64", c.Workers)
	}
	if !(c.KMSRate >= 0) || math.IsInf(c.KMSRate, 0) {
		return fmt.Errorf("import-kms-rate: %v is not a rate (calls per second, 0: no cap)", c.KMSRate)
	}
	if c.ProgressInterval <= 0 {
		return fmt.Errorf("import-progress-interval: %v is not positive", c.ProgressInterval)
	}
	return nil
}
