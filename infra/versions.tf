# The root module: provider configuration and state backend (the reusable resources are in modules/rlcleanup).
terraform {
  required_version = ">= 1.5"

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = ">= 5.40, < 7"
    }
  }

  # Partial configuration: the state bucket is supplied at init time, e.g.
  #   terraform init -backend-config=bucket=<state bucket>
  backend "gcs" {
    prefix = "rlcleanup"
  }
}

provider "google" {
  project = var.project_id
  region  = var.region
}
