# The runner cache (docs/cache.md): runner classes with a `cache` entry (runner_classes) serve
# actions/cache and the setup actions' caches from this bucket and from their own disks. The bucket
# exists when at least one class has the cache on.
#
# Who reaches the bucket: the reconciler alone. The runners' instance role has NO bucket access
# (iam.tf grants it none); each S3 request of an instance's cache server goes to a URL the
# reconciler presigned for the scope of the run it recorded for that instance (RUNNERPOOL_CACHE_BUCKET),
# so the requests are authorised by the reconciler's role below, under the object prefix v1/ where
# every cache object lives. A job holding the instance's credentials can therefore read or write
# nothing here: TestExampleCacheBucketInSimulator shows both with an IAM simulator we did not write.
#
# Eviction: the reconciler keeps each repository under its class's repository_limit_gib (least
# recently used first) and removes what was unused past max_age_days; the lifecycle rule below is the
# backstop (objects older than cache_expiration_days, whatever their use) and removes the parts of
# uploads that never completed.

variable "cache_kms_key_arn" {
  description = "Customer-managed KMS key the cache bucket's objects are encrypted with (SSE-KMS); the reconciler's role may use it through S3 only. Empty: the AWS-managed key aws/s3, which needs no key permission."
  type        = string
  default     = ""
}

variable "cache_expiration_days" {
  description = "The bucket's lifecycle backstop: cache objects are deleted this many days after they were written, whatever their use (the reconciler's own eviction by max_age and repository_limit_gib comes first). At least the longest cache max_age_days of the runner classes."
  type        = number
  default     = 30

  validation {
    condition     = var.cache_expiration_days >= 1 && floor(var.cache_expiration_days) == var.cache_expiration_days
    error_message = "cache_expiration_days must be a whole number of days, at least 1."
  }
}

locals {
  cache_classes = sort([for k, c in var.runner_classes : k if c.cache != null])
  cache         = length(local.cache_classes) > 0
  # Bucket names are global: the account and the region make this one unique (at most 63 characters
  # with a 32-character deployment id).
  cache_bucket = "${local.name}-cache-${local.account}-${local.region}"
  # The longest max_age of a class with the cache on, in days.
  cache_max_age_days = local.cache ? max([for k in local.cache_classes : var.runner_classes[k].cache.max_age_days]...) : 0
}

resource "aws_s3_bucket" "cache" {
  count = local.cache ? 1 : 0

  bucket = local.cache_bucket
  # Caches are rebuilt by the next job that misses them: nothing here needs keeping on destroy.
  force_destroy = true

  lifecycle {
    precondition {
      condition     = var.cache_expiration_days >= local.cache_max_age_days
      error_message = "cache_expiration_days is shorter than a runner class's cache max_age_days: the lifecycle backstop would delete entries the class keeps."
    }
  }
}

resource "aws_s3_bucket_public_access_block" "cache" {
  count = local.cache ? 1 : 0

  bucket                  = aws_s3_bucket.cache[0].id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

# Objects belong to the bucket's account whoever uploads them; ACLs are off.
resource "aws_s3_bucket_ownership_controls" "cache" {
  count = local.cache ? 1 : 0

  bucket = aws_s3_bucket.cache[0].id
  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

# SSE-KMS with aws/s3, or cache_kms_key_arn. The bucket key makes S3 ask KMS once per bucket key
# rather than once per object, which keeps the KMS requests of many small cache objects cheap.
resource "aws_s3_bucket_server_side_encryption_configuration" "cache" {
  count = local.cache ? 1 : 0

  bucket = aws_s3_bucket.cache[0].id
  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm     = "aws:kms"
      kms_master_key_id = var.cache_kms_key_arn == "" ? null : var.cache_kms_key_arn
    }
    bucket_key_enabled = true
  }
}

resource "aws_s3_bucket_lifecycle_configuration" "cache" {
  count = local.cache ? 1 : 0

  bucket = aws_s3_bucket.cache[0].id

  rule {
    id     = "backstop"
    status = "Enabled"

    filter {
      prefix = "v1/"
    }
    expiration {
      days = var.cache_expiration_days
    }
    abort_incomplete_multipart_upload {
      days_after_initiation = 1
    }
  }
}

# Requests without TLS are refused, whoever signs them.
data "aws_iam_policy_document" "cache_bucket" {
  count = local.cache ? 1 : 0

  statement {
    sid       = "TLSOnly"
    effect    = "Deny"
    actions   = ["s3:*"]
    resources = [aws_s3_bucket.cache[0].arn, "${aws_s3_bucket.cache[0].arn}/*"]
    principals {
      type        = "*"
      identifiers = ["*"]
    }
    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }
}

resource "aws_s3_bucket_policy" "cache" {
  count = local.cache ? 1 : 0

  bucket = aws_s3_bucket.cache[0].id
  policy = data.aws_iam_policy_document.cache_bucket[0].json
  # The public access block first: S3 refuses some policies while it is being set.
  depends_on = [aws_s3_bucket_public_access_block.cache]
}

# The reconciler presigns the cache servers' requests (get, put, list under v1/) with these
# permissions, and its eviction pass lists and deletes under v1/. Nothing outside v1/.
data "aws_iam_policy_document" "reconciler_cache" {
  count = local.cache ? 1 : 0

  statement {
    sid       = "CacheObjects"
    actions   = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"]
    resources = ["${aws_s3_bucket.cache[0].arn}/v1/*"]
  }

  statement {
    sid       = "CacheListings"
    actions   = ["s3:ListBucket"]
    resources = [aws_s3_bucket.cache[0].arn]
    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = ["v1/*"]
    }
  }

  # With cache_kms_key_arn: S3 encrypts a put and decrypts a get with the presigner's permission on
  # the key, through S3 only.
  dynamic "statement" {
    for_each = var.cache_kms_key_arn == "" ? [] : [var.cache_kms_key_arn]
    content {
      sid       = "CacheKey"
      actions   = ["kms:GenerateDataKey", "kms:Decrypt"]
      resources = [statement.value]
      condition {
        test     = "StringEquals"
        variable = "kms:ViaService"
        values   = ["s3.${local.region}.amazonaws.com"]
      }
    }
  }
}

resource "aws_iam_role_policy" "reconciler_cache" {
  count = local.cache ? 1 : 0

  name   = "runnerpool-reconciler-cache"
  role   = aws_iam_role.reconciler.id
  policy = data.aws_iam_policy_document.reconciler_cache[0].json
}

output "cache_bucket" {
  description = "The runner cache's bucket (empty when no runner class has the cache on)."
  value       = local.cache ? aws_s3_bucket.cache[0].bucket : ""
}
